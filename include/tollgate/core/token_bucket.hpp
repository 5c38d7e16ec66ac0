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
  static Result<TokenBucket> Create(int64_t capacity, Rate rate);

  // Decides a request of `cost` (>= 1) at `now`. When allowed, `state` is updated (refilled and
  // debited); when rejected it is left as it was: rejected requests consume nothing.
  Decision Evaluate(State& state, int64_t cost, Instant now) const;

  // When `state` becomes equivalent to a fresh (full) bucket.
  Instant FullAt(const State& state) const;

  // The most this bucket can hold, in units (tokens x rate().per_micros), `elapsed_us` after it
  // held at most `level_units`: it refills at rate() until full. A bound on state that others
  // may only have lowered since (the deny cache in front of a shared store).
  int64_t UpperBoundAfter(int64_t level_units, int64_t elapsed_us) const;

  int64_t capacity() const { return capacity_; }
  Rate rate() const { return rate_; }
  // Seconds to refill from empty (C / r, rounded up): `w` of the IETF RateLimit-Policy.
  int64_t RefillSeconds() const;

 private:
  TokenBucket(int64_t capacity, Rate rate) : capacity_(capacity), rate_(rate) {}
  int64_t capacity_;
  Rate rate_;
};

}  // namespace tollgate::core
