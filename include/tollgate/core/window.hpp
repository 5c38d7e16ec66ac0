// Window counters: the fixed window and the sliding-window counter.
#pragma once

#include <cstdint>

#include <tollgate/core/decision.hpp>
#include <tollgate/core/result.hpp>
#include <tollgate/core/state.hpp>
#include <tollgate/core/time.hpp>

namespace tollgate::core {

// One counter per window [i*W, (i+1)*W). Thread-safe (immutable; state passed in).
// Documented flaw, not hidden: a client can pass up to 2x the limit across a window edge
// (the end of one window and the start of the next). State: a = window index, b = count.
class FixedWindow {
 public:
  static Result<FixedWindow> Create(int64_t limit, Duration window);
  // Updates `state` only when allowed.
  Decision Evaluate(State& state, int64_t cost, Instant now) const;
  // When `state` becomes equivalent to a fresh one (its window ends).
  Instant ExpiresAt(const State& state) const;
  int64_t limit() const { return limit_; }
  Duration window() const { return window_; }

 private:
  FixedWindow(int64_t limit, Duration window) : limit_(limit), window_(window) {}
  int64_t limit_;
  Duration window_;
};

// Approximate rolling count from two counters: prev * (1 - elapsed/W) + curr, with elapsed in
// whole milliseconds and the comparison done exactly in integers. Thread-safe.
// State: a = current window index, b = (prev << 32) | curr.
class SlidingCounter {
 public:
  // REQUIRES nothing; the window is a whole number of milliseconds and limit <= 2^31 - 1.
  static Result<SlidingCounter> Create(int64_t limit, Duration window);
  Decision Evaluate(State& state, int64_t cost, Instant now) const;
  Instant ExpiresAt(const State& state) const;
  int64_t limit() const { return limit_; }
  Duration window() const { return Duration::Millis(window_ms_); }

 private:
  SlidingCounter(int64_t limit, int64_t window_ms) : limit_(limit), window_ms_(window_ms) {}
  int64_t limit_;
  int64_t window_ms_;
};

}  // namespace tollgate::core
