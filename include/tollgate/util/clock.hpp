// The clock seam: objects that must read time themselves take a Clock&.
#pragma once

#include <chrono>

#include <tollgate/core/time.hpp>

namespace tollgate::util {

// Thread-safe implementations only.
class Clock {
 public:
  virtual ~Clock() = default;
  // Now on the limiter's timeline (Unix microseconds, like Redis TIME).
  virtual core::Instant Now() const = 0;
};

// The system's real-time clock. Thread-safe.
class SystemClock final : public Clock {
 public:
  core::Instant Now() const override {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::system_clock::now().time_since_epoch());
    return core::Instant::FromUnixMicros(us.count());
  }
  static SystemClock& Instance() {
    static SystemClock clock;
    return clock;
  }
};

}  // namespace tollgate::util
