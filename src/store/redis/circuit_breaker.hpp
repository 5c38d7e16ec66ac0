// The circuit breaker in front of Redis: a dead store is not called until it is back.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tollgate::store::redis {

// Thread-safe (relaxed atomics): the lanes of one store share one breaker, so any lane's
// failures open it for all and any lane's success closes it.
//
// Closed, it lets every call go. `failures_to_open` failures in a row open it: calls then fail at
// once, and once `open_for` has passed one call probes; a success closes it, a failure opens it
// for another `open_for`. Time is the caller's `now` (steady clock), so tests pass literal times.
class CircuitBreaker {
 public:
  using Clock = std::chrono::steady_clock;

  // `open_gauge` (RedisStoreStats::breaker_open) is 1 while the breaker is open, 0 once closed.
  CircuitBreaker(int failures_to_open, std::chrono::milliseconds open_for,
                 std::atomic<int>& open_gauge);

  // Whether a call may go at `now`. Open, once its time is up, one call probes: the one that
  // moves the time on by `open_for` (lanes race for it); the others still fail at once.
  bool Admit(Clock::time_point now);

  // A call succeeded: closes the breaker. `now()` is read only when this ends a run of
  // failures; the state is written only on a change (lanes on other threads read it on every
  // call), so the usual success reads no clock and writes nothing.
  template <class NowFn>
  void RecordSuccess(NowFn&& now) {
    if (consecutive_failures_.load(std::memory_order_relaxed) != 0) Close(now());
  }

  // A call failed at `now` (a failure that counts: not one the breaker itself refused). True
  // when this is the failure that opened the breaker (not one while it was open already).
  bool RecordFailure(Clock::time_point now);

  // Lets the next call probe at once if the breaker is open (its time not up yet): the store now
  // talks to another node, a new master after a failover (Sentinel).
  void ProbeNow() { open_until_.store(0, std::memory_order_relaxed); }

  // Whether a call succeeded after failures at a time later than `t`: a connection waiting out
  // its reconnect backoff since `t` reconnects at once when another lane has seen Redis answer.
  bool RecoveredSince(Clock::time_point t) const;

 private:
  void Close(Clock::time_point now);

  const int failures_to_open_;
  const Clock::duration open_for_;
  std::atomic<int>& open_gauge_;
  std::atomic<int> consecutive_failures_{0};
  std::atomic<Clock::rep> open_until_{0};    // steady clock ticks
  std::atomic<Clock::rep> recovered_at_{0};  // steady clock ticks: the last success after failures
};

}  // namespace tollgate::store::redis
