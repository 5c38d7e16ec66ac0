#include "store/redis/circuit_breaker.hpp"

namespace tollgate::store::redis {

CircuitBreaker::CircuitBreaker(int failures_to_open, std::chrono::milliseconds open_for,
                               std::atomic<int>& open_gauge)
    : failures_to_open_(failures_to_open), open_for_(open_for), open_gauge_(open_gauge) {}

bool CircuitBreaker::Admit(Clock::time_point now) {
  if (consecutive_failures_.load(std::memory_order_relaxed) < failures_to_open_) return true;
  const Clock::rep now_ticks = now.time_since_epoch().count();
  Clock::rep until = open_until_.load(std::memory_order_relaxed);
  const Clock::rep next = now_ticks + open_for_.count();
  return now_ticks >= until &&
         open_until_.compare_exchange_strong(until, next, std::memory_order_relaxed);
}

bool CircuitBreaker::RecordFailure(Clock::time_point now) {
  const int failures = consecutive_failures_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (failures < failures_to_open_) return false;
  open_until_.store((now + open_for_).time_since_epoch().count(), std::memory_order_relaxed);
  open_gauge_.store(1, std::memory_order_relaxed);
  return failures == failures_to_open_;
}

bool CircuitBreaker::RecoveredSince(Clock::time_point t) const {
  return recovered_at_.load(std::memory_order_relaxed) > t.time_since_epoch().count();
}

void CircuitBreaker::Close(Clock::time_point now) {
  consecutive_failures_.store(0, std::memory_order_relaxed);
  recovered_at_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
  open_gauge_.store(0, std::memory_order_relaxed);
}

}  // namespace tollgate::store::redis
