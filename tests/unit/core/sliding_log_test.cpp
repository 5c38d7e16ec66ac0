#include <tollgate/core/sliding_log.hpp>

#include <gtest/gtest.h>

namespace tollgate::core {
namespace {

const Instant kT0 = Instant::FromUnixSeconds(1'790'000'000);

TEST(SlidingLog, ExactlyLimitThenRetryAfterUntilOldestLeaves) {
  const SlidingLog log = SlidingLog::Create(3, Duration::Seconds(10)).value();
  LogState s;
  ASSERT_TRUE(log.Evaluate(s, 1, kT0).allowed);
  ASSERT_TRUE(log.Evaluate(s, 1, kT0 + Duration::Seconds(2)).allowed);
  const Decision last = log.Evaluate(s, 1, kT0 + Duration::Seconds(4));
  ASSERT_TRUE(last.allowed);
  EXPECT_EQ(last.remaining, 0);
  const Decision d = log.Evaluate(s, 1, kT0 + Duration::Seconds(5));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, Duration::Seconds(5));  // the entry at t0 leaves at t0 + 10 s
  EXPECT_EQ(d.reset, Duration::Seconds(9));        // the newest leaves at t0 + 14 s
  EXPECT_FALSE(log.Evaluate(s, 1, kT0 + Duration::Seconds(10) - Duration::Micros(1)).allowed);
  EXPECT_TRUE(log.Evaluate(s, 1, kT0 + Duration::Seconds(10)).allowed);
}

TEST(SlidingLog, RejectedRequestsAreNeverRecorded) {
  const SlidingLog log = SlidingLog::Create(2, Duration::Seconds(1)).value();
  LogState s;
  ASSERT_TRUE(log.Evaluate(s, 2, kT0).allowed);
  // A client hammering during its 429 recovers as soon as its accepted requests age out.
  for (int i = 1; i < 1000; ++i) {
    ASSERT_FALSE(log.Evaluate(s, 1, kT0 + Duration::Micros(i * 999)).allowed);
  }
  EXPECT_EQ(s.size(), 1u);
  EXPECT_TRUE(log.Evaluate(s, 1, kT0 + Duration::Seconds(1)).allowed);
}

TEST(SlidingLog, CostCountsAndRetryAfterWaitsForEnoughEntries) {
  const SlidingLog log = SlidingLog::Create(10, Duration::Seconds(60)).value();
  LogState s;
  ASSERT_TRUE(log.Evaluate(s, 4, kT0).allowed);
  ASSERT_TRUE(log.Evaluate(s, 4, kT0 + Duration::Seconds(10)).allowed);
  const Decision d = log.Evaluate(s, 6, kT0 + Duration::Seconds(20));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 2);
  // Needs 4 more units: only the first entry (4) must leave, at t0 + 60.
  EXPECT_EQ(d.retry_after, Duration::Seconds(40));
  const Decision big = log.Evaluate(s, 9, kT0 + Duration::Seconds(20));
  EXPECT_EQ(big.retry_after, Duration::Seconds(50));  // both entries must leave
}

TEST(SlidingLog, CostAboveLimitNeverPasses) {
  const SlidingLog log = SlidingLog::Create(5, Duration::Seconds(1)).value();
  LogState s;
  const Decision d = log.Evaluate(s, 6, kT0);
  EXPECT_EQ(d.code, RejectCode::kCostExceedsCapacity);
  EXPECT_TRUE(d.retry_after.IsInfinite());
  EXPECT_TRUE(s.empty());
}

TEST(SlidingLog, PeekRecordsNothing) {
  const SlidingLog log = SlidingLog::Create(5, Duration::Seconds(1)).value();
  LogState s;
  ASSERT_TRUE(log.Evaluate(s, 2, kT0).allowed);
  const Decision d = log.Peek(s, 3, kT0);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 3);
  EXPECT_EQ(s.size(), 1u);
}

TEST(SlidingLog, InvalidParameters) {
  EXPECT_EQ(SlidingLog::Create(0, Duration::Seconds(1)).error(), "limit: must be > 0");
  EXPECT_EQ(SlidingLog::Create(1, Duration()).error(), "window_seconds: must be > 0");
}

}  // namespace
}  // namespace tollgate::core
