// The clock seam, the one clock interface of the project: objects that must read time
// themselves take a Clock& (tests pass tests/support/fake_clock.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <tollgate/core/time.hpp>

namespace tollgate::util {

// Thread-safe implementations only.
class Clock {
 public:
  virtual ~Clock() = default;
  // Now on the limiter's timeline (Unix microseconds, like Redis TIME).
  virtual core::Instant Now() const = 0;
  // A monotonic reading in microseconds from an arbitrary origin, for intervals only: it never
  // goes back when the wall clock is set.
  virtual int64_t SteadyMicros() const = 0;
};

// The system's real-time clock. Thread-safe.
class SystemClock final : public Clock {
 public:
  core::Instant Now() const override {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::system_clock::now().time_since_epoch());
    return core::Instant::FromUnixMicros(us.count());
  }
  int64_t SteadyMicros() const override {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static SystemClock& Instance() {
    static SystemClock clock;
    return clock;
  }
};

// Appends the wall-clock time now as 2026-11-29T21:59:56.123Z (UTC; the log lines' `ts`).
void AppendIsoNow(std::string& out);

}  // namespace tollgate::util
