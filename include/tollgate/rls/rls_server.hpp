// Envoy's rate limit service API v3 over gRPC, answered by the same engine as the gateway.
// gRPC stays out of this header.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
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
  int threads = 2;  // gRPC handler threads
};

// Counters for /metrics. Thread-safe.
struct RlsStats {
  std::atomic<uint64_t> ok{0};
  std::atomic<uint64_t> over_limit{0};
  std::atomic<uint64_t> unknown_domain{0};
  std::atomic<uint64_t> unknown_key{0};
};

// Thread-safe. Each ShouldRateLimit call evaluates every descriptor it maps (all-or-nothing per
// descriptor, like a gateway request): hits_addend is the cost (0 means 1). An unknown domain and
// a descriptor with no mapped entry answer OK (nothing is configured to limit them); an unknown
// API key answers OVER_LIMIT (a denial, as the gateway's 401).
class RlsServer {
 public:
  using PolicyFn = std::function<std::shared_ptr<const policy::Policy>()>;
  RlsServer(RlsOptions options, engine::Engine& engine, PolicyFn policy);
  ~RlsServer();

  // Binds and starts serving; returns the bound port (listen may say port 0).
  // grpc.health.v1.Health answers SERVING from Start() (for the whole server and for
  // envoy.service.ratelimit.v3.RateLimitService) until SetServing(false): the drain.
  core::Result<int> Start();
  void SetServing(bool serving);
  void Shutdown();
  const RlsStats& stats() const;
  void ExportMetrics(metrics::Registry& registry) const;

  struct Impl;  // defined in rls_server.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::rls
