// Evaluates one request's checks against a store: all-or-nothing, shadow, fail mode.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>

#include <tollgate/core/decision.hpp>
#include <tollgate/core/time.hpp>
#include <tollgate/store/memory_store.hpp>
#include <tollgate/store/store.hpp>

namespace tollgate::engine {

// What a route does when the store cannot answer.
enum class FailMode : uint8_t {
  kOpen,    // allow, count as degraded
  kClosed,  // reject with 503 limiter_unavailable
  // decide on the local store (Engine::SetLocal) with each check's cost multiplied by the
  // number of replicas: each replica admits 1/replicas of every limit; without a local store,
  // as kOpen
  kLocal,
};

// The combined answer for one request. Thread-compatible (a value type).
struct Verdict {
  enum class Kind : uint8_t {
    kAllowed,      // every enforced check allowed (shadow checks may have rejected)
    kRejected,     // an enforced check rejected; nothing was consumed
    kDegraded,     // the store failed and the route fails open: allowed, unlimited
    kUnavailable,  // the store failed and the route fails closed: 503
  };
  Kind kind = Kind::kAllowed;
  // Index of the enforced check that limited (largest retry-after among the rejecting ones),
  // else of the enforced check with the smallest remaining; -1 when there is none.
  int primary = -1;
  // Largest retry-after over the rejecting enforced checks (Infinite for a cost that can never
  // pass); zero when allowed.
  core::Duration retry_after;
  core::RejectCode code = core::RejectCode::kNone;
  // Shadow checks that would have rejected this request.
  int shadow_rejections = 0;
  // Allowed and smoothed: how long to hold the request before serving it (the longest delay of
  // the enforced checks; shadow checks never hold). Zero otherwise.
  core::Duration delay;
  core::Instant now;
  store::StoreErrc store_error = store::StoreErrc::kOk;
  // The store failed and the local store decided (FailMode::kLocal): kind is kAllowed or
  // kRejected, and the decisions are in the units of this replica's share of each limit.
  bool local = false;

  bool allowed() const { return kind == Kind::kAllowed || kind == Kind::kDegraded; }
};

// Combines per-check decisions (pure; exposed for tests).
Verdict Combine(std::span<const store::Check> checks, std::span<const core::Decision> decisions);

// Counters for /metrics. Thread-safe (relaxed atomics).
struct EngineStats {
  std::atomic<uint64_t> allowed{0};
  std::atomic<uint64_t> rejected{0};
  std::atomic<uint64_t> shadow_rejected{0};  // requests a shadow check would have rejected
  std::atomic<uint64_t> degraded{0};         // store failed, allowed (fail-open)
  std::atomic<uint64_t> unavailable{0};      // store failed, rejected (fail-closed)
  std::atomic<uint64_t> local_allowed{0};    // store failed, the local store allowed
  std::atomic<uint64_t> local_rejected{0};   // store failed, the local store rejected
};

// Thread-safe: holds no per-request state; the store is thread-safe.
class Engine {
 public:
  explicit Engine(store::Store& store) : store_(store) {}
  // On the memory store, which answers at once: DecideNow() serves without a callback.
  explicit Engine(store::MemoryStore& memory) : store_(memory), at_once_(&memory) {}

  struct Request {
    store::Batch batch;
    FailMode fail_mode = FailMode::kOpen;
  };

  // Decides `request`, writing per-check decisions into `decisions` (one per check), and calls
  // `done` once, possibly later on the store's thread. Data behind `request` and `decisions`
  // must stay valid until then.
  void Decide(const Request& request, std::span<core::Decision> decisions,
              std::function<void(Verdict)> done);

  // The verdict for the store's answer `result` to `request` (what Decide() passes on), for
  // callers that apply the batch themselves on a store that answers at once.
  Verdict Conclude(const Request& request, std::span<const core::Decision> decisions,
                   const store::ApplyResult& result);

  // The store FailMode::kLocal decides on while the store fails, and how many replicas share
  // the store (read at each such decision; at least 1). Call before the first Decide().
  void SetLocal(store::MemoryStore& local, std::function<int()> replicas) {
    local_ = &local;
    replicas_ = std::move(replicas);
  }

  // Whether the store answers at once on the caller's thread (the memory store): then
  // DecideNow() serves, with no coroutine, no hop through an executor and no callback.
  bool DecidesAtOnce() const { return at_once_ != nullptr; }
  // REQUIRES: DecidesAtOnce().
  Verdict DecideNow(const Request& request, std::span<core::Decision> decisions) {
    return Conclude(request, decisions, at_once_->ApplyNow(request.batch, decisions));
  }

  const EngineStats& stats() const { return stats_; }
  store::Store& store() { return store_; }

 private:
  // FailMode::kLocal after the store's `error`: the batch on the local store, costs scaled.
  void DecideLocally(const Request& request, std::span<core::Decision> decisions,
                     store::StoreErrc error, const std::function<void(Verdict)>& done);

  store::Store& store_;
  store::MemoryStore* const at_once_ = nullptr;  // store_, when it answers at once
  store::MemoryStore* local_ = nullptr;
  std::function<int()> replicas_;
  EngineStats stats_;
};

}  // namespace tollgate::engine
