// Token bucket: B(t) = min(C, B(t0) + r (t - t0)); a request of cost k passes iff B(t) >= k.
#pragma once

#include <cstdint>

#include <tollgate/core/decision.hpp>
#include <tollgate/core/rate.hpp>
#include <tollgate/core/result.hpp>
#include <tollgate/core/state.hpp>
#include <tollgate/core/time.hpp>

namespace tollgate::core {

// Thread-safe (immutable parameters; state is passed in).
//
// Exact integer arithmetic: one token is `rate.per_micros` units and the bucket refills
// `rate.tokens` units per microsecond, so no rounding ever accumulates. State: a = the deficit
// (units missing from a full bucket), b = the time of that deficit. A zero state is a full bucket.
class TokenBucket {
 public:
  // Largest capacity in units (capacity * rate.per_micros). 2^53 keeps every value exact in the
  // double-precision numbers of Redis Lua, so both stores agree bit for bit.
  static constexpr int64_t kMaxUnits = int64_t{1} << 53;

  // REQUIRES nothing: invalid parameters give an error naming the field.
  // `max_delay`: smoothing (`on_limit: delay`). A request the bucket would admit within it is
  // admitted now with Decision::delay, its tokens taken in advance (the deficit may pass the
  // capacity by up to max_delay of refill), so later ones queue behind it: GCRA's schedule.
  static Result<TokenBucket> Create(int64_t capacity, Rate rate, Duration max_delay = {});

  // Decides a request of `cost` (>= 1) at `now`. When allowed, `state` is updated (refilled and
  // debited); when rejected it is left as it was: rejected requests consume nothing.
  // `may_delay` false: as without max_delay (a request that cannot be held is rejected).
  Decision Evaluate(State& state, int64_t cost, Instant now, bool may_delay = true) const;

  // When `state` becomes equivalent to a fresh (full) bucket.
  Instant FullAt(const State& state) const;

  // The most this bucket can hold, in units (tokens x rate().per_micros), `elapsed_us` after it
  // held at most `level_units`: it refills at rate() until full. A bound on state that others
  // may only have lowered since (the deny cache in front of a shared store).
  int64_t UpperBoundAfter(int64_t level_units, int64_t elapsed_us) const;

  int64_t capacity() const { return capacity_; }
  Rate rate() const { return rate_; }
  // The most the deficit may pass the capacity by, in units: max_delay of refill.
  int64_t debt_units() const { return debt_units_; }
  bool smooths() const { return debt_units_ > 0; }
  // Seconds to refill from empty (C / r, rounded up): `w` of the IETF RateLimit-Policy.
  int64_t RefillSeconds() const;

 private:
  TokenBucket(int64_t capacity, Rate rate, int64_t debt_units)
      : capacity_(capacity), rate_(rate), debt_units_(debt_units) {}
  int64_t capacity_;
  Rate rate_;
  int64_t debt_units_ = 0;
};

}  // namespace tollgate::core
