// Time on the limiter's timeline.
//
// Every algorithm takes the current time as an argument and never reads a clock. The limiter's
// timeline is microseconds since the Unix epoch: Redis TIME has the same unit and origin, so the
// in-memory and Redis stores compute identical answers, and calendar quotas read the same value
// as a UTC date. See docs/adr/0001-one-timeline.md.
#pragma once

#include <compare>
#include <cstdint>
#include <limits>

namespace tollgate::core {

// A length of time in microseconds. Thread-safe (a value type).
class Duration {
 public:
  constexpr Duration() = default;
  static constexpr Duration Micros(int64_t us) { return Duration(us); }
  static constexpr Duration Millis(int64_t ms) { return Duration(ms * 1000); }
  static constexpr Duration Seconds(int64_t s) { return Duration(s * 1'000'000); }
  // A wait that never ends (e.g. a cost larger than the capacity).
  static constexpr Duration Infinite() { return Duration(std::numeric_limits<int64_t>::max()); }

  constexpr int64_t micros() const { return us_; }
  constexpr bool IsInfinite() const { return us_ == std::numeric_limits<int64_t>::max(); }
  // Whole seconds, rounded up: the unit of Retry-After and of the reset headers.
  constexpr int64_t CeilSeconds() const { return us_ <= 0 ? 0 : (us_ + 999'999) / 1'000'000; }

  constexpr auto operator<=>(const Duration&) const = default;
  constexpr Duration operator+(Duration o) const { return Duration(us_ + o.us_); }
  constexpr Duration operator-(Duration o) const { return Duration(us_ - o.us_); }

 private:
  constexpr explicit Duration(int64_t us) : us_(us) {}
  int64_t us_ = 0;
};

// A point on the limiter's timeline: microseconds since 1970-01-01T00:00:00Z.
class Instant {
 public:
  constexpr Instant() = default;
  static constexpr Instant FromUnixMicros(int64_t us) { return Instant(us); }
  static constexpr Instant FromUnixSeconds(int64_t s) { return Instant(s * 1'000'000); }

  constexpr int64_t unix_micros() const { return us_; }

  constexpr auto operator<=>(const Instant&) const = default;
  constexpr Instant operator+(Duration d) const { return Instant(us_ + d.micros()); }
  constexpr Instant operator-(Duration d) const { return Instant(us_ - d.micros()); }
  constexpr Duration operator-(Instant o) const { return Duration::Micros(us_ - o.us_); }

 private:
  constexpr explicit Instant(int64_t us) : us_(us) {}
  int64_t us_ = 0;
};

}  // namespace tollgate::core
