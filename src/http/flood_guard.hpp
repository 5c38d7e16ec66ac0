// Counting what a peer sends within an interval: an HTTP/2 connection's resets and control frames
// (issue 34: rapid reset, CVE-2023-44487; SETTINGS, PING, PRIORITY, WINDOW_UPDATE and empty DATA
// floods). Pure; time is passed in.
#pragma once

#include <chrono>
#include <cstdint>

namespace tollgate::http {

// Not thread-safe; owned by one connection. Fixed windows of `interval` from the first count:
// a flood of twice `max` can straddle two of them, which bounds it all the same.
class FloodGuard {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  FloodGuard(uint32_t max, std::chrono::steady_clock::duration interval)
      : max_(max), interval_(interval) {}

  // Counts one at `now`; false once more than `max` were counted in the current window.
  bool Count(TimePoint now) {
    if (count_ == 0 || now - window_start_ >= interval_) {
      window_start_ = now;
      count_ = 0;
    }
    return ++count_ <= max_;
  }

 private:
  uint32_t max_;
  std::chrono::steady_clock::duration interval_;
  TimePoint window_start_{};
  uint32_t count_ = 0;
};

}  // namespace tollgate::http
