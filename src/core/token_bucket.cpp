#include <tollgate/core/token_bucket.hpp>

#include <algorithm>
#include <string>

namespace tollgate::core {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

}  // namespace

Result<TokenBucket> TokenBucket::Create(int64_t capacity, Rate rate, Duration max_delay) {
  if (capacity <= 0) return Error{"capacity: must be > 0"};
  if (rate.tokens <= 0 || rate.per_micros <= 0) return Error{"refill: must be > 0"};
  if (rate.per_micros > kMaxUnits / capacity) {
    return Error{"capacity: " + std::to_string(capacity) +
                 " is too large for this refill rate's precision (capacity x rate denominator "
                 "must stay below 2^53)"};
  }
  if (rate.tokens > kMaxUnits) return Error{"refill: too large"};
  const int64_t delay_us = max_delay.micros();
  if (delay_us < 0) return Error{"max_delay_ms: must be >= 0"};
  // The deficit stays below 2^53 (exact in Redis Lua) with the debt added to the capacity.
  if (delay_us > 0 && delay_us > (kMaxUnits - capacity * rate.per_micros) / rate.tokens) {
    return Error{"max_delay_ms: too long for this bucket's precision"};
  }
  return TokenBucket(capacity, rate, delay_us * rate.tokens);
}

Decision TokenBucket::Evaluate(State& state, int64_t cost, Instant now, bool may_delay) const {
  const int64_t unit = rate_.per_micros;  // units per token
  const int64_t full = capacity_ * unit;
  // Refill. A clock that steps backwards refills nothing (elapsed clamps at 0).
  int64_t deficit = state.a;
  const int64_t elapsed = now.unix_micros() - state.b;
  if (deficit > 0 && elapsed > 0) {
    // elapsed * tokens may overflow for long idle times; compare first.
    deficit = elapsed >= CeilDiv(deficit, rate_.tokens) ? 0 : deficit - elapsed * rate_.tokens;
  }
  Decision d;
  d.limit = capacity_;
  if (cost > capacity_) {
    d.allowed = false;
    d.code = RejectCode::kCostExceedsCapacity;
    d.retry_after = Duration::Infinite();
  } else if (const int64_t debt = may_delay ? debt_units_ : 0;
             deficit + cost * unit <= full + debt) {
    deficit += cost * unit;
    state.a = deficit;
    state.b = now.unix_micros();
    // Past the capacity: its tokens arrive later; it is served when they have.
    d.delay = Duration::Micros(CeilDiv(deficit - full, rate_.tokens));
  } else {
    d.allowed = false;
    d.code = RejectCode::kRateLimited;
    // When the same request would be admitted (with its delay, if it may have one).
    d.retry_after = Duration::Micros(CeilDiv(deficit + cost * unit - full - debt, rate_.tokens));
  }
  d.remaining = std::max<int64_t>(0, full - deficit) / unit;
  d.reset = Duration::Micros(CeilDiv(deficit, rate_.tokens));
  return d;
}

Instant TokenBucket::FullAt(const State& state) const {
  return Instant::FromUnixMicros(state.b + CeilDiv(state.a, rate_.tokens));
}

int64_t TokenBucket::UpperBoundAfter(int64_t level_units, int64_t elapsed_us) const {
  const int64_t full = capacity_ * rate_.per_micros;
  if (elapsed_us >= CeilDiv(full - level_units, rate_.tokens)) return full;
  return level_units + elapsed_us * rate_.tokens;
}

int64_t TokenBucket::RefillSeconds() const {
  // capacity * per_micros / tokens microseconds, rounded up to seconds.
  const int64_t us = CeilDiv(capacity_ * rate_.per_micros, rate_.tokens);
  return Duration::Micros(us).CeilSeconds();
}

}  // namespace tollgate::core
