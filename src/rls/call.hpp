// One ShouldRateLimit call in flight, answered asynchronously from the store's completions.
// Private to rls/.
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <tollgate/config/envoy_rls.hpp>
#include <tollgate/contract/contract.hpp>
#include <tollgate/engine/checks.hpp>
#include <tollgate/engine/engine.hpp>
#include <tollgate/metrics/metrics.hpp>
#include <tollgate/rls/rls_server.hpp>

#include "rls.pb.h"

namespace tollgate::rls::internal {

namespace pb = envoy::service::ratelimit::v3;

// Upstream's statistics of one descriptor path (counters of the metrics registry).
struct DescriptorCounters {
  std::atomic<uint64_t>* hits = nullptr;
  std::atomic<uint64_t>* over_limit = nullptr;
  std::atomic<uint64_t>* near_limit = nullptr;
  std::atomic<uint64_t>* within_limit = nullptr;
  std::atomic<uint64_t>* shadow_mode = nullptr;
};
DescriptorCounters CountersFor(metrics::Registry& registry, std::string_view domain,
                               std::string_view stat_key);

// envoy_config as loaded, with the counters of each entry that has a rate limit. Immutable.
struct EnvoySnapshot {
  config::EnvoyRlsConfig config;
  std::unordered_map<const config::EnvoyDescriptor*, DescriptorCounters> counters;
};

// What every call reads of its server. Thread-safe.
struct ServerContext {
  const RlsOptions& options;
  engine::Engine& engine;
  RlsStats& stats;
  metrics::Registry& registry;
  std::atomic<uint64_t>& detailed_series;  // detailed_metric series made (bounded)
};

// Checks decided together: one engine::Decide, all-or-nothing.
struct Group {
  std::array<store::Check, engine::kMaxChecks> checks;
  std::array<core::Decision, engine::kMaxChecks> decisions;
  size_t n = 0;
  engine::Verdict verdict;
  std::string scope;  // the batch's
};

// A call's answer, once decided: the response is complete, or `error` says why the call is
// invalid (INVALID_ARGUMENT).
using Done = std::function<void(std::string error)>;

class Call {
 public:
  Call(const ServerContext& server, const pb::RateLimitRequest& request,
       pb::RateLimitResponse& response, Done done)
      : server_(server), request_(request), response_(response), done_(std::move(done)) {}
  virtual ~Call() = default;

  // Decides the call; `done` runs once, here or on a store thread, and then the call is
  // deleted. REQUIRES: allocated with new.
  void Start();

 protected:
  // Fills groups_ (Decide()s nothing yet) and any answer known without the store; a non-empty
  // return is an invalid call.
  virtual std::string Prepare() = 0;
  // Writes the response from the decided groups.
  virtual void Answer() = 0;

  Group& AddGroup() { return groups_.emplace_back(); }
  void DropLastGroup() { groups_.pop_back(); }  // the last AddGroup()'s, nothing decided yet

  const ServerContext& server_;
  const pb::RateLimitRequest& request_;
  pb::RateLimitResponse& response_;
  std::deque<Group> groups_;  // stable addresses: decisions are written into them

 private:
  void Release();
  Done done_;
  std::atomic<size_t> pending_{1};
};

// The calls of a domain of RlsOptions::domains (tollgate identities).
std::unique_ptr<Call> MappedCall(const ServerContext& server, const RlsDomain& domain,
                                 std::shared_ptr<const policy::Policy> policy,
                                 const pb::RateLimitRequest& request,
                                 pb::RateLimitResponse& response, Done done);

// The calls of a domain of envoy_config.
std::unique_ptr<Call> EnvoyCall(const ServerContext& server,
                                std::shared_ptr<const EnvoySnapshot> snapshot,
                                const config::EnvoyDomain& domain,
                                const pb::RateLimitRequest& request,
                                pb::RateLimitResponse& response, Done done);

// The cost of a descriptor: its own hits_addend (field 3, 0 reads) when set, else the call's
// (0 means 1); capped at 2^31-1.
int64_t CostOf(const pb::RateLimitRequest& request, const pb::RateLimitDescriptor& descriptor);

// Appends `headers` to the response's response_headers_to_add (Envoy adds them to its answer).
void AddResponseHeaders(const contract::HeaderList& headers, pb::RateLimitResponse& response);

// current_limit for a tollgate limit: "N per unit" in the largest unit that fits.
void DescribeLimit(const core::Limit& limit, core::Instant now,
                   pb::RateLimitResponse::RateLimit* out);

}  // namespace tollgate::rls::internal
