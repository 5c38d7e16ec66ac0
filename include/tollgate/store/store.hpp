// Where limiter state lives. One interface for the in-memory store and Redis.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <tollgate/core/decision.hpp>
#include <tollgate/core/limit.hpp>
#include <tollgate/core/time.hpp>

namespace tollgate::store {

// One check of a batch. The store keys its state by (scope, name, algorithm).
struct Check {
  std::string_view name;     // e.g. "burst", "daily"
  const core::Limit* limit;  // not null; outlives the call
  int64_t cost = 1;          // >= 0; 0 reads without changing anything
  bool enforced = true;      // false: shadow, computed and reported, never blocks
  // The check's own scope ("ip:<addr>", "global") when it is not the batch's; empty: the
  // batch's. A batch whose checks span scopes is still decided all-or-nothing (the memory store
  // locks each shard involved; Redis runs one script over all the keys, which Redis Cluster
  // allows only within one slot).
  std::string_view scope;
  // false: a smoothing token bucket rejects instead of delaying (the caller cannot hold the
  // request: its bounds of held requests are reached, or it is not the gateway).
  bool may_delay = true;
};

enum class Mode : uint8_t {
  kConsume,  // all-or-nothing: commit iff every enforced check allows
  kPeek,     // compute only; nothing changes (GET /v1/rate-limit)
};

// The checks of one identity, evaluated atomically. `scope` ("key:<id>", "ip:<addr>") is the
// identity part of every key and the Redis Cluster hash tag, so all checks of a batch live in
// one memory shard and one cluster slot.
struct Batch {
  std::string_view scope;
  std::span<const Check> checks;
  Mode mode = Mode::kConsume;
  // The time to decide at. Unset: the store's own clock (Redis TIME inside the script for
  // Redis; the MemoryStore's Clock). Set: tests and simulations replay exact times.
  std::optional<core::Instant> now;
};

enum class StoreErrc : uint8_t {
  kOk,
  kUnavailable,  // cannot reach the store (connection refused, reset, circuit open)
  kTimeout,      // the call's deadline passed
  kProtocol,     // an answer the client did not understand
};

// The outcome of Apply(). When `error` is kOk, `decisions[i]` answers `checks[i]`.
struct ApplyResult {
  StoreErrc error = StoreErrc::kOk;
  std::string message;  // set on error
  bool committed = false;
  core::Instant now;  // the time the decisions were made at
  // Answered from a token lease this replica holds (LeasingStore), not from the store's state:
  // its remaining and reset are the lease's, no bound of the store's tokens (DenyCache).
  bool from_lease = false;
};

// Interface. Implementations are thread-safe: Apply() may be called from any thread.
class Store {
 public:
  using Completion = std::function<void(ApplyResult&&)>;

  virtual ~Store() = default;

  // Evaluates `batch`; writes one decision per check into `decisions` (size >= checks) and then
  // calls `done`, at once (memory) or later on the store's own thread (Redis). Rule: in kConsume
  // mode, if every enforced check allows, each check that allows consumes its cost; if any
  // enforced check rejects, nothing changes. `batch`'s data and `decisions` must stay valid
  // until `done` runs.
  virtual void Apply(const Batch& batch, std::span<core::Decision> decisions, Completion done) = 0;

  virtual std::string_view Name() const = 0;
};

}  // namespace tollgate::store
