#include <tollgate/core/window.hpp>

#include <algorithm>

namespace tollgate::core {
namespace {

// floor(a / b) for b > 0, also for negative a (times before 1970 stay well defined).
int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && (a < 0)); }

constexpr int64_t kMaxCount = (int64_t{1} << 31) - 1;

Decision CostExceedsCapacity(int64_t limit) {
  Decision d;
  d.allowed = false;
  d.limit = limit;
  d.code = RejectCode::kCostExceedsCapacity;
  d.retry_after = Duration::Infinite();
  return d;
}

}  // namespace

Result<FixedWindow> FixedWindow::Create(int64_t limit, Duration window) {
  if (limit <= 0) return Error{"limit: must be > 0"};
  if (window.micros() <= 0) return Error{"window_seconds: must be > 0"};
  return FixedWindow(limit, window);
}

Decision FixedWindow::Evaluate(State& state, int64_t cost, Instant now) const {
  const int64_t w = window_.micros();
  const int64_t index = FloorDiv(now.unix_micros(), w);
  const int64_t count = state.a == index ? state.b : 0;
  const Duration to_end = Duration::Micros((index + 1) * w - now.unix_micros());
  if (cost > limit_) {
    Decision d = CostExceedsCapacity(limit_);
    d.remaining = limit_ - count;
    return d;
  }
  Decision d;
  d.limit = limit_;
  if (count + cost <= limit_) {
    state.a = index;
    state.b = count + cost;
    d.remaining = limit_ - state.b;
  } else {
    d.allowed = false;
    d.code = RejectCode::kRateLimited;
    d.retry_after = to_end;
    d.remaining = std::max<int64_t>(0, limit_ - count);
  }
  d.reset = d.remaining == limit_ ? Duration() : to_end;
  return d;
}

Instant FixedWindow::ExpiresAt(const State& state) const {
  return Instant::FromUnixMicros((state.a + 1) * window_.micros());
}

Result<SlidingCounter> SlidingCounter::Create(int64_t limit, Duration window) {
  if (limit <= 0) return Error{"limit: must be > 0"};
  if (limit > kMaxCount) return Error{"limit: must be <= 2147483647 for sliding_window_counter"};
  if (window.micros() <= 0) return Error{"window_seconds: must be > 0"};
  if (window.micros() % 1000 != 0) return Error{"window_seconds: must be whole milliseconds"};
  const int64_t window_ms = window.micros() / 1000;
  // prev * (W - e) + (curr + k) * W must stay exact (also in Redis Lua doubles: 2^53).
  if (window_ms > (int64_t{1} << 53) / (2 * limit)) {
    return Error{"window_seconds: window (ms) x limit too large for sliding_window_counter"};
  }
  return SlidingCounter(limit, window_ms);
}

Decision SlidingCounter::Evaluate(State& state, int64_t cost, Instant now) const {
  const int64_t w = window_ms_;
  const int64_t now_ms = FloorDiv(now.unix_micros(), 1000);
  const int64_t index = FloorDiv(now_ms, w);
  const int64_t elapsed = now_ms - index * w;  // [0, w)
  int64_t prev = 0;
  int64_t curr = 0;
  if (state.a == index) {
    prev = state.b >> 32;
    curr = state.b & 0xffffffff;
  } else if (state.a == index - 1) {
    prev = state.b & 0xffffffff;
  }
  // Window ends, in microseconds from now.
  const int64_t end_us = (index + 1) * w * 1000 - now.unix_micros();
  const int64_t next_end_us = end_us + w * 1000;

  Decision d;
  d.limit = limit_;
  // Weighted count scaled by w: prev * (w - elapsed) + curr * w.
  const int64_t weighted = prev * (w - elapsed) + curr * w;
  auto remaining_after = [&](int64_t extra) {
    const int64_t left = limit_ * w - weighted - extra * w;
    return std::max<int64_t>(0, left / w);
  };
  if (cost > limit_) {
    d = CostExceedsCapacity(limit_);
    d.remaining = remaining_after(0);
  } else if (weighted + cost * w <= limit_ * w) {
    curr += cost;
    state.a = index;
    state.b = (prev << 32) | curr;
    d.remaining = remaining_after(cost);
  } else {
    d.allowed = false;
    d.code = RejectCode::kRateLimited;
    d.remaining = remaining_after(0);
    if (curr + cost <= limit_) {
      // Later in this window: prev * (w - e) <= (limit - curr - cost) * w.
      const int64_t e = w - ((limit_ - curr - cost) * w) / prev;  // prev > 0 here
      d.retry_after = Duration::Micros((index * w + e) * 1000 - now.unix_micros());
    } else {
      // In the next window, where curr becomes prev: curr * (w - e) <= (limit - cost) * w.
      const int64_t e = w - ((limit_ - cost) * w) / curr;
      d.retry_after = Duration::Micros(end_us + e * 1000);
    }
  }
  d.reset = Duration::Micros(curr > 0 ? next_end_us : (prev > 0 ? end_us : 0));
  return d;
}

Instant SlidingCounter::ExpiresAt(const State& state) const {
  return Instant::FromUnixMicros((state.a + 2) * window_ms_ * 1000);
}

}  // namespace tollgate::core
