// The gateway: a reverse proxy that limits API keys before forwarding to the upstream.
// Boost.Beast stays out of this header (build times: see STYLE.md).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <tollgate/config/config.hpp>
#include <tollgate/core/result.hpp>
#include <tollgate/engine/engine.hpp>
#include <tollgate/metrics/metrics.hpp>
#include <tollgate/policy/key_source.hpp>
#include <tollgate/policy/policy.hpp>
#include <tollgate/policy/policy_holder.hpp>
#include <tollgate/store/chores.hpp>

namespace tollgate::usage {
class UsageMeter;
}

namespace tollgate::http {

// What the gateway is handed (issue 32, part 2): it builds no store and no key source. The
// composition root (app/) builds them from the configuration; they outlive the gateway.
struct GatewayServices {
  engine::Engine& engine;
  store::Chores& store;       // readiness, reset, sweeps, lanes, status
  store::Replicas* replicas;  // null: no other replica shares the store (memory)
  usage::UsageMeter& meter;
  // The policy in force: the gateway installs it (start-up, reload, key changes) and reads it.
  policy::PolicyHolder& policy;
  // The process's metrics: the gateway declares its series in it and serves GET /metrics.
  metrics::Registry& metrics;
  // keys.source: postgres: starts the key source with the gateway's change callback and log.
  // Empty: keys come from the configuration file.
  std::function<core::Result<std::unique_ptr<policy::KeySource>>(policy::KeySource::ChangeCallback,
                                                                 policy::KeySource::LogCallback)>
      start_keys;
};

// Not thread-safe to construct; Run() owns the calling thread until shutdown.
class Gateway {
 public:
  // `config_path` is re-read on SIGHUP and POST /admin/reload; `config_text` is the file's text
  // `config` was loaded from (its version: GET /admin/ui/data, the log). Throws
  // std::runtime_error when a listener cannot be bound (start-up only).
  Gateway(std::string config_path, config::Config config, std::string_view config_text,
          GatewayServices services);
  ~Gateway();

  // Serves until SIGTERM or SIGINT, then drains in-flight requests (server.drain_timeout_ms)
  // and returns the process exit code (0).
  int Run();

  // For other listeners of the process (the Envoy RLS server, composed in app/), which take
  // the engine, the policy and the metrics registry from the services: the admin API's deny
  // list (POST /admin/deny), null while it is empty. Thread-safe.
  std::shared_ptr<const policy::DenyList> RuntimeDeny();
  // Called once, on the main thread, when SIGTERM or SIGINT starts the drain (the RLS server
  // reports NOT_SERVING from then on). Set before Run().
  void OnDrain(std::function<void()> hook);
  // Called after every reload attempt (SIGHUP, POST /admin/reload), whatever its result, on the
  // thread that reloads: other components re-read their own files. Set before Run().
  void OnReload(std::function<void()> hook);
  // An endpoint of another component on the admin listener: POST `path` with a body of at most
  // 64 KiB; `handler` gets the body and calls `reply` once, on any thread, with the status and
  // a JSON body. Set before Run().
  using AdminReply = std::function<void(int status, std::string body)>;
  using AdminHandler = std::function<void(std::string body, AdminReply reply)>;
  void AddAdminEndpoint(std::string path, AdminHandler handler);

  struct Impl;  // defined in gateway.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::http
