// A clock that moves only when a test moves it.
#pragma once

#include <atomic>

#include <tollgate/util/clock.hpp>

namespace tollgate::testing {

// Thread-safe.
class FakeClock final : public util::Clock {
 public:
  explicit FakeClock(core::Instant start = core::Instant::FromUnixSeconds(1'790'000'000))
      : us_(start.unix_micros()) {}
  core::Instant Now() const override { return core::Instant::FromUnixMicros(us_.load()); }
  // Moves with Now(), as a replica's steady clock moves with the store's time.
  int64_t SteadyMicros() const override { return us_.load(); }
  void Advance(core::Duration d) { us_.fetch_add(d.micros()); }
  void Set(core::Instant t) { us_.store(t.unix_micros()); }

 private:
  std::atomic<int64_t> us_;
};

}  // namespace tollgate::testing
