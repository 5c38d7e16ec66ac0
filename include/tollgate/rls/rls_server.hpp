// Envoy's rate limit service API v3 over gRPC, answered by the same engine as the gateway.
// gRPC stays out of this header.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <tollgate/core/result.hpp>
#include <tollgate/engine/engine.hpp>
#include <tollgate/policy/policy.hpp>

namespace tollgate::metrics {
class Registry;
}

namespace tollgate::rls {

// How the descriptors of one RLS domain map to tollgate identities.
struct RlsDomain {
  std::string domain;     // RateLimitRequest.domain
  std::string key_entry;  // descriptor entry whose value is an API key (its plan applies)
  std::string ip_entry;   // descriptor entry whose value is a client address (anonymous limits)
};

struct RlsOptions {
  std::string listen = "127.0.0.1:8081";  // host:port of the gRPC server
  std::vector<RlsDomain> domains;
  // envoyproxy/ratelimit descriptor files (config/envoy_rls.hpp): a file or a directory,
  // re-read by Reload() and when a file changes. Empty: none.
  std::string envoy_config;
  bool shadow_mode = false;       // envoy_config domains: every answer OK (counted)
  bool response_headers = false;  // envoy_config domains: RateLimit fields for Envoy to add
  double near_limit_ratio = 0.8;
  // false (Redis Cluster): the descriptors of one request are decided one by one, each
  // all-or-nothing, as upstream does; true: one request's descriptors are decided together.
  bool store_spans_scopes = true;
  int watch_interval_ms = 1000;  // how often envoy_config's files are checked for changes
  // Where per-descriptor counters live (the gateway's /metrics); null: the server's own.
  metrics::Registry* registry = nullptr;
  // response_headers: which sets of fields (the gateway's `headers:`).
  config::HeadersConfig headers;
  // The runtime deny list (the gateway's admin API) that `domains` honour beside the
  // configuration's; returns null while it is empty. Unset: the configuration's only.
  std::function<std::shared_ptr<const policy::DenyList>()> runtime_deny;
};

// Counters for /metrics. Thread-safe.
struct RlsStats {
  std::atomic<uint64_t> ok{0};
  std::atomic<uint64_t> over_limit{0};
  std::atomic<uint64_t> unknown_domain{0};
  std::atomic<uint64_t> unknown_key{0};
  std::atomic<uint64_t> denied{0};         // descriptors of `domains` the deny list refuses
  std::atomic<uint64_t> invalid{0};        // calls answered INVALID_ARGUMENT
  std::atomic<uint64_t> shadow_ok{0};      // calls OVER_LIMIT turned OK by rls.shadow_mode
  std::atomic<uint64_t> degraded{0};       // decisions the store failed: answered OK
  std::atomic<uint64_t> reloads_ok{0};     // envoy_config loads after the first
  std::atomic<uint64_t> reloads_error{0};  // refused (the previous files keep serving)
};

// Thread-safe. An asynchronous gRPC server (the callback API): no thread waits on the store;
// a call is answered from the store's completion.
//
// Domains of `domains` (tollgate identities): each descriptor is one request of the API key
// or address it names (all-or-nothing per descriptor); hits_addend is the cost (0 means 1).
// A descriptor with no mapped entry answers OK; an unknown API key answers OVER_LIMIT (the
// gateway's 401), as does a key or address the deny list refuses (the gateway's 403; it
// consumes nothing).
//
// Domains of `envoy_config`: upstream's matching (docs/envoy-ratelimit.md). The descriptors of
// one call are decided together: a call rejected by one descriptor consumes none of the others
// (upstream consumes them all). At most engine::kMaxChecks limited descriptors per call.
//
// An unknown domain answers OK for every descriptor (counted). A call without a domain or
// descriptors, a descriptor without entries, an entry without a key or with a key or value over
// 4,096 bytes, or too many limited descriptors answers INVALID_ARGUMENT and consumes nothing.
class RlsServer {
 public:
  using PolicyFn = std::function<std::shared_ptr<const policy::Policy>()>;
  RlsServer(RlsOptions options, engine::Engine& engine, PolicyFn policy);
  ~RlsServer();

  // Loads envoy_config (an error when it is invalid, or names a domain of `domains`), binds and
  // starts serving; returns the bound port (listen may say port 0).
  // grpc.health.v1.Health answers SERVING from Start() (for the whole server and for
  // envoy.service.ratelimit.v3.RateLimitService) until SetServing(false): the drain.
  core::Result<int> Start();
  // Re-reads envoy_config (SIGHUP). An invalid file is refused, named in the error, and the
  // files loaded before keep serving.
  std::optional<core::Error> Reload();
  void SetServing(bool serving);
  void Shutdown();
  // upstream's /json for debugging: a RateLimitRequest in protobuf's JSON mapping, decided as a
  // gRPC call is; `reply` gets 200 (OK) or 429 (OVER_LIMIT) and the RateLimitResponse in the
  // same mapping, or 400 and a problem body for a request that is not one. Any thread.
  void DecideJson(std::string body, std::function<void(int status, std::string body)> reply);
  const RlsStats& stats() const;
  void ExportMetrics(metrics::Registry& registry) const;

  struct Impl;  // defined in rls_server.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::rls
