#include "store/redis/circuit_breaker.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace tollgate::store::redis {
namespace {

using std::chrono::milliseconds;
using Clock = CircuitBreaker::Clock;

// A steady-clock time `ms` after the clock's epoch.
Clock::time_point At(int64_t ms) { return Clock::time_point(milliseconds(ms)); }

// Opens after 3 failures in a row, for 100 ms.
struct Breaker {
  std::atomic<int> gauge{0};
  CircuitBreaker breaker{3, milliseconds(100), gauge};

  void Fail(int times, int64_t at_ms) {
    for (int i = 0; i < times; ++i) breaker.RecordFailure(At(at_ms));
  }
  void Succeed(int64_t at_ms) {
    breaker.RecordSuccess([at_ms] { return At(at_ms); });
  }
};

TEST(CircuitBreaker, ClosedLetsEveryCallGo) {
  Breaker b;
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(b.breaker.Admit(At(i)));
  EXPECT_EQ(b.gauge.load(), 0);
}

TEST(CircuitBreaker, OpensOnTheNthFailureInARow) {
  Breaker b;
  EXPECT_FALSE(b.breaker.RecordFailure(At(0)));
  EXPECT_FALSE(b.breaker.RecordFailure(At(0)));
  EXPECT_TRUE(b.breaker.Admit(At(1)));
  EXPECT_EQ(b.gauge.load(), 0);
  EXPECT_TRUE(b.breaker.RecordFailure(At(10)));  // the one that opened it
  EXPECT_EQ(b.gauge.load(), 1);
  EXPECT_FALSE(b.breaker.RecordFailure(At(10)));  // open already
  EXPECT_FALSE(b.breaker.Admit(At(10)));
  EXPECT_FALSE(b.breaker.Admit(At(109)));
}

TEST(CircuitBreaker, ASuccessEndsTheRun) {
  Breaker b;
  b.Fail(2, 0);
  b.Succeed(1);
  b.Fail(2, 2);
  EXPECT_TRUE(b.breaker.Admit(At(3)));
  EXPECT_EQ(b.gauge.load(), 0);
}

// Once its time is up, one call probes; the others still fail at once, until the probe's own
// time is up too.
TEST(CircuitBreaker, OpenLetsOneProbeGoPerOpenTime) {
  Breaker b;
  b.Fail(3, 0);
  EXPECT_FALSE(b.breaker.Admit(At(99)));
  EXPECT_TRUE(b.breaker.Admit(At(100)));  // the probe
  EXPECT_FALSE(b.breaker.Admit(At(100)));
  EXPECT_FALSE(b.breaker.Admit(At(199)));
  EXPECT_TRUE(b.breaker.Admit(At(200)));  // no answer yet: another probe
  EXPECT_FALSE(b.breaker.Admit(At(250)));
}

TEST(CircuitBreaker, AFailedProbeOpensItAgain) {
  Breaker b;
  b.Fail(3, 0);
  ASSERT_TRUE(b.breaker.Admit(At(100)));
  EXPECT_FALSE(b.breaker.RecordFailure(At(150)));  // open already: not the one that opened it
  EXPECT_EQ(b.gauge.load(), 1);
  EXPECT_FALSE(b.breaker.Admit(At(249)));  // another 100 ms from the failure
  EXPECT_TRUE(b.breaker.Admit(At(250)));
}

TEST(CircuitBreaker, ASuccessfulProbeClosesIt) {
  Breaker b;
  b.Fail(3, 0);
  ASSERT_TRUE(b.breaker.Admit(At(100)));
  b.Succeed(120);
  EXPECT_EQ(b.gauge.load(), 0);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(b.breaker.Admit(At(121)));
  b.Fail(2, 130);
  EXPECT_TRUE(b.breaker.Admit(At(131)));  // a new run of failures starts from zero
}

// Decisions succeed all the time: a success while nothing failed reads no clock.
TEST(CircuitBreaker, ASuccessReadsTheClockOnlyAfterFailures) {
  Breaker b;
  int reads = 0;
  auto now = [&reads] {
    ++reads;
    return At(5);
  };
  b.breaker.RecordSuccess(now);
  b.breaker.RecordSuccess(now);
  EXPECT_EQ(reads, 0);
  b.Fail(1, 0);
  b.breaker.RecordSuccess(now);
  b.breaker.RecordSuccess(now);
  EXPECT_EQ(reads, 1);
}

// A connection waiting out its reconnect backoff since `t` reconnects at once when a call
// succeeded after failures later than `t`.
TEST(CircuitBreaker, RecoveredSinceIsTheLastSuccessAfterFailures) {
  Breaker b;
  EXPECT_FALSE(b.breaker.RecoveredSince(At(0)));
  b.Fail(1, 10);
  b.Succeed(100);
  EXPECT_TRUE(b.breaker.RecoveredSince(At(50)));
  EXPECT_FALSE(b.breaker.RecoveredSince(At(100)));
  EXPECT_FALSE(b.breaker.RecoveredSince(At(150)));
  b.Succeed(200);  // no failure before it: not a recovery
  EXPECT_FALSE(b.breaker.RecoveredSince(At(150)));
}

// Lanes on several threads race for the probe: exactly one wins.
TEST(CircuitBreaker, OneProbeAmongRacingThreads) {
  Breaker b;
  b.Fail(3, 0);
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) admitted.fetch_add(b.breaker.Admit(At(100)) ? 1 : 0);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(admitted.load(), 1);
}

}  // namespace
}  // namespace tollgate::store::redis
