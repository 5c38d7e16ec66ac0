#include <tollgate/core/token_bucket.hpp>

#include <gtest/gtest.h>

namespace tollgate::core {
namespace {

const Instant kT0 = Instant::FromUnixSeconds(1'790'000'000);

TokenBucket Bucket(int64_t capacity, const char* per_second) {
  return TokenBucket::Create(capacity, Rate::Parse(per_second, 1).value()).value();
}

// The deny cache's bound (issue 19 moved it here from engine/deny_cache.cpp): a level known at
// most `level` refills at the rate until full, and never past it.
TEST(TokenBucket, UpperBoundAfterRefillsAtTheRateUntilFull) {
  const TokenBucket b = Bucket(20, "0.5");  // 1 token per 2 s
  const int64_t unit = b.rate().per_micros;
  const int64_t full = 20 * unit;
  EXPECT_EQ(b.UpperBoundAfter(0, 0), 0);
  EXPECT_EQ(b.UpperBoundAfter(0, 2'000'000), b.rate().tokens * 2'000'000);  // one token's worth
  EXPECT_EQ(b.UpperBoundAfter(0, 2'000'000) / unit, 1);
  EXPECT_EQ(b.UpperBoundAfter(5 * unit, 0), 5 * unit);
  EXPECT_EQ(b.UpperBoundAfter(19 * unit, 2'000'000), full);
  EXPECT_EQ(b.UpperBoundAfter(19 * unit, 60'000'000), full);  // capped
  EXPECT_EQ(b.UpperBoundAfter(full, 0), full);
  EXPECT_EQ(b.UpperBoundAfter(0, 40'000'000), full);  // empty to full in C/r
}

TEST(TokenBucket, ExactlyCapacityAcceptedThenHonestRetryAfter) {
  const TokenBucket b = Bucket(20, "0.5");  // Free plan
  State s;
  for (int i = 0; i < 20; ++i) {
    const Decision d = b.Evaluate(s, 1, kT0);
    ASSERT_TRUE(d.allowed) << i;
    EXPECT_EQ(d.remaining, 19 - i);
  }
  const Decision d = b.Evaluate(s, 1, kT0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.code, RejectCode::kRateLimited);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_EQ(d.retry_after, Duration::Seconds(2));  // one token at 0.5/s
  EXPECT_EQ(d.reset, Duration::Seconds(40));       // full again after C/r
  EXPECT_EQ(d.limit, 20);
}

TEST(TokenBucket, PassesAfterWaitingExactlyRetryAfterNotBefore) {
  const TokenBucket b = Bucket(5, "3");  // 1/3 s per token: not a whole number of microseconds
  State s;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(b.Evaluate(s, 1, kT0).allowed);
  const Decision rejected = b.Evaluate(s, 1, kT0);
  ASSERT_FALSE(rejected.allowed);
  EXPECT_EQ(rejected.retry_after, Duration::Micros(333'334));  // ceil(1e6 / 3)
  EXPECT_EQ(rejected.retry_after.CeilSeconds(), 1);
  State copy = s;
  EXPECT_FALSE(b.Evaluate(copy, 1, kT0 + rejected.retry_after - Duration::Micros(1)).allowed);
  EXPECT_TRUE(b.Evaluate(s, 1, kT0 + rejected.retry_after).allowed);
}

TEST(TokenBucket, RejectedRequestsConsumeNothing) {
  const TokenBucket b = Bucket(2, "1");
  State s;
  ASSERT_TRUE(b.Evaluate(s, 2, kT0).allowed);
  const State before = s;
  for (int i = 0; i < 100; ++i) ASSERT_FALSE(b.Evaluate(s, 1, kT0 + Duration::Millis(i)).allowed);
  EXPECT_EQ(s, before);
  EXPECT_TRUE(b.Evaluate(s, 1, kT0 + Duration::Seconds(1)).allowed);
}

TEST(TokenBucket, RefillAtExactlyTheRateSustainsFasterIsRejected) {
  const TokenBucket b = Bucket(10, "5");
  State s;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(b.Evaluate(s, 1, kT0).allowed);
  // Sustained at exactly 5/s for an hour: every request passes.
  Instant t = kT0;
  for (int i = 0; i < 5 * 3600; ++i) {
    t = t + Duration::Millis(200);
    ASSERT_TRUE(b.Evaluate(s, 1, t).allowed) << i;
  }
  // Slightly faster: rejections appear.
  int rejected = 0;
  for (int i = 0; i < 100; ++i) {
    t = t + Duration::Millis(199);
    if (!b.Evaluate(s, 1, t).allowed) ++rejected;
  }
  EXPECT_GT(rejected, 0);
}

TEST(TokenBucket, CostGreaterThanOne) {
  const TokenBucket b = Bucket(20, "0.5");
  State s;
  EXPECT_TRUE(b.Evaluate(s, 15, kT0).allowed);
  const Decision d = b.Evaluate(s, 6, kT0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 5);
  EXPECT_EQ(d.retry_after, Duration::Seconds(2));  // one token missing
  EXPECT_TRUE(b.Evaluate(s, 5, kT0).allowed);
}

TEST(TokenBucket, CostAboveCapacityNeverPasses) {
  const TokenBucket b = Bucket(20, "0.5");
  State s;
  const Decision d = b.Evaluate(s, 21, kT0 + Duration::Seconds(1'000'000));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.code, RejectCode::kCostExceedsCapacity);
  EXPECT_TRUE(d.retry_after.IsInfinite());
  EXPECT_EQ(d.remaining, 20);
  EXPECT_EQ(s, State{});
}

TEST(TokenBucket, LongIdleDoesNotOverflow) {
  const TokenBucket b = Bucket(2'000, "50");
  State s;
  ASSERT_TRUE(b.Evaluate(s, 2'000, kT0).allowed);
  const Decision d = b.Evaluate(s, 1, kT0 + Duration::Seconds(int64_t{100} * 365 * 86'400));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 1'999);
}

TEST(TokenBucket, ClockSteppingBackRefillsNothing) {
  const TokenBucket b = Bucket(2, "1");
  State s;
  ASSERT_TRUE(b.Evaluate(s, 2, kT0).allowed);
  EXPECT_FALSE(b.Evaluate(s, 1, kT0 - Duration::Seconds(10)).allowed);
  EXPECT_TRUE(b.Evaluate(s, 1, kT0 + Duration::Seconds(1)).allowed);
}

TEST(TokenBucket, ResetAndRefillSeconds) {
  const TokenBucket b = Bucket(20, "0.5");
  EXPECT_EQ(b.RefillSeconds(), 40);
  EXPECT_EQ(Bucket(200, "5").RefillSeconds(), 40);
  EXPECT_EQ(Bucket(10, "3").RefillSeconds(), 4);  // 3.33 s rounded up
  State s;
  const Decision d = b.Evaluate(s, 3, kT0);
  EXPECT_EQ(d.reset, Duration::Seconds(6));
  EXPECT_EQ(b.FullAt(s), kT0 + Duration::Seconds(6));
}

TEST(TokenBucket, InvalidParametersNameTheField) {
  EXPECT_EQ(TokenBucket::Create(0, Rate{1, 1}).error(), "capacity: must be > 0");
  EXPECT_EQ(TokenBucket::Create(-5, Rate{1, 1}).error(), "capacity: must be > 0");
  EXPECT_EQ(TokenBucket::Create(5, Rate{0, 1}).error(), "refill: must be > 0");
  EXPECT_FALSE(TokenBucket::Create(int64_t{1} << 40, Rate{1, 1'000'000'000}).ok());
}

}  // namespace
}  // namespace tollgate::core
