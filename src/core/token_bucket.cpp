#include <tollgate/core/token_bucket.hpp>

#include <algorithm>
#include <string>

namespace tollgate::core {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

}  // namespace

Result<TokenBucket> TokenBucket::Create(int64_t capacity, Rate rate) {
  if (capacity <= 0) return Error{"capacity: must be > 0"};
  if (rate.tokens <= 0 || rate.per_micros <= 0) return Error{"refill: must be > 0"};
  if (rate.per_micros > kMaxUnits / capacity) {
    return Error{"capacity: " + std::to_string(capacity) +
                 " is too large for this refill rate's precision (capacity x rate denominator "
                 "must stay below 2^53)"};
  }
  if (rate.tokens > kMaxUnits) return Error{"refill: too large"};
  return TokenBucket(capacity, rate);
}

Decision TokenBucket::Evaluate(State& state, int64_t cost, Instant now) const {
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
  } else if (deficit + cost * unit <= full) {
    deficit += cost * unit;
    state.a = deficit;
    state.b = now.unix_micros();
  } else {
    d.allowed = false;
    d.code = RejectCode::kRateLimited;
    d.retry_after = Duration::Micros(CeilDiv(deficit + cost * unit - full, rate_.tokens));
  }
  d.remaining = (full - deficit) / unit;
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
