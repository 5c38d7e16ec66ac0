// One configured limit, whatever its algorithm: what stores and the engine work with.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <variant>

#include <tollgate/core/decision.hpp>
#include <tollgate/core/quota.hpp>
#include <tollgate/core/rate.hpp>
#include <tollgate/core/result.hpp>
#include <tollgate/core/sliding_log.hpp>
#include <tollgate/core/state.hpp>
#include <tollgate/core/time.hpp>
#include <tollgate/core/token_bucket.hpp>
#include <tollgate/core/window.hpp>

namespace tollgate::core {

enum class Algorithm : uint8_t {
  kTokenBucket,
  kSlidingWindowLog,
  kSlidingWindowCounter,
  kFixedWindow,
  kQuota,
};

// "token_bucket", "sliding_window_log", "sliding_window_counter", "fixed_window", "quota".
Result<Algorithm> ParseAlgorithm(std::string_view name);
std::string_view AlgorithmName(Algorithm algorithm);

// The parameters of a limit as configured. Which fields apply depends on the algorithm:
//   token_bucket:             capacity, refill
//   sliding_window_log,
//   sliding_window_counter,
//   fixed_window:             limit, window
//   quota:                    period, allowance and/or ceiling (neither: metered only)
struct LimitSpec {
  Algorithm algorithm = Algorithm::kTokenBucket;
  int64_t capacity = 0;
  Rate refill;
  int64_t limit = 0;
  Duration window;
  Period period = Period::kDay;
  std::optional<int64_t> allowance;
  std::optional<int64_t> ceiling;
  Duration max_delay;  // token buckets: smoothing (`on_limit: delay`); zero: reject
  // Token buckets on a shared store: tokens a replica may take at once and spend locally
  // (store::LeasingStore); zero: every request asks the store (exact).
  int64_t lease = 0;
};

// A validated limit. Thread-safe (immutable).
class Limit {
 public:
  // Errors name the offending field ("capacity: must be > 0").
  static Result<Limit> Create(const LimitSpec& spec);

  Algorithm algorithm() const { return static_cast<Algorithm>(impl_.index()); }
  // The sliding-window log keeps a variable-size LogState; every other algorithm a State.
  bool UsesLog() const { return algorithm() == Algorithm::kSlidingWindowLog; }

  // Decides a request of `cost` >= 0 (0 reads the state without changing it). The state
  // changes only when the request is allowed.
  // `may_delay` false: a smoothing token bucket rejects instead of delaying (its held-request
  // bounds are reached, or the caller cannot hold requests).
  Decision Evaluate(State& state, int64_t cost, Instant now, bool may_delay = true) const;
  Decision Evaluate(LogState& state, int64_t cost, Instant now) const;
  // The decision a log would give, without recording the request (remaining is before it).
  Decision Peek(LogState& state, int64_t cost, Instant now) const;

  // When a fixed-size state becomes equivalent to a fresh one and may be forgotten.
  Instant ExpiresAt(const State& state) const;
  // The same for a log.
  Instant ExpiresAt(const LogState& state) const;

  // q and w of the IETF RateLimit-Policy: the quota, and the window in seconds (for a token
  // bucket the time to refill from empty; for a calendar quota the current period's length).
  int64_t PolicyQuota() const;
  int64_t PolicyWindowSeconds(Instant now) const;
  // The most requests per second the limit admits in the long run: a bucket's refill rate, a
  // window's limit over its length, a quota's ceiling over its period (a month counted as 31
  // days; infinity without a ceiling: an allowance never rejects). Compares plans (Policy's
  // strictest plan).
  double SustainedPerSecond() const;

  const std::variant<TokenBucket, SlidingLog, SlidingCounter, FixedWindow, Quota>& impl() const {
    return impl_;
  }
  // LimitSpec::lease: 0 unless a token bucket leases.
  int64_t lease() const { return lease_; }

 private:
  template <class T>
  explicit Limit(T impl) : impl_(std::move(impl)) {}
  // Order matches Algorithm.
  std::variant<TokenBucket, SlidingLog, SlidingCounter, FixedWindow, Quota> impl_;
  int64_t lease_ = 0;
};

}  // namespace tollgate::core
