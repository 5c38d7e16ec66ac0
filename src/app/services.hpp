// The process's services, built from the configuration (issue 32, part 2): the store stack
// (memory; or Redis with token leases, the deny cache and the local fallback), its chores, the
// engine on it, the usage meter, the policy holder, the key source and the metrics registry.
// The gateway and the RLS server are handed them (http::GatewayServices); they build none.
#pragma once

#include <memory>

#include <tollgate/config/config.hpp>
#include <tollgate/engine/engine.hpp>
#include <tollgate/http/gateway.hpp>
#include <tollgate/metrics/metrics.hpp>
#include <tollgate/policy/policy_holder.hpp>

namespace tollgate::app {

// Usage goes to the backend a tenth of the keys per tick (100 ms), each key once a second
// (docs/benchmarks.md: one batch of all keys a second held Redis decisions up behind it).
inline constexpr size_t kUsageSlices = 10;

// Outlives the gateway and the RLS server it serves.
class Services {
 public:
  // The memory or the Redis stack of `config.store`. Throws std::runtime_error when the store
  // cannot be set up (a bad URL, TLS files that cannot be read).
  static std::unique_ptr<Services> Open(const config::Config& config);
  virtual ~Services() = default;

  virtual engine::Engine& engine() = 0;
  // The policy in force: empty until the gateway installs the first one (its keys may come
  // from the key source it starts).
  policy::PolicyHolder& policy() { return policy_; }
  // Every component's series (GET /metrics on the gateway's admin listener).
  metrics::Registry& metrics() { return metrics_; }
  // For the gateway; `start_keys` set when keys.source is postgres.
  virtual http::GatewayServices ForGateway() = 0;
  // Declares the store's own series (and the replicas seen) in `registry`; the key source's
  // are the gateway's.
  virtual void ExportMetrics(metrics::Registry& registry) const = 0;

 protected:
  explicit Services(const config::Config& config);
  // How the gateway starts the PostgreSQL key source (empty without keys.source).
  decltype(http::GatewayServices::start_keys) start_keys_;
  policy::PolicyHolder policy_;
  // Declared before the stacks' members: it outlives the gauges they register (never read
  // once the gateway, which serves it, is gone).
  metrics::Registry metrics_;
};

}  // namespace tollgate::app
