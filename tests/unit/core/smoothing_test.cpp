// Smoothing (issue 20): a token bucket with max_delay admits a request that its tokens would
// admit within max_delay, with the delay, taking the tokens in advance (GCRA's schedule).
#include <gtest/gtest.h>
#include <tollgate/core/limit.hpp>

namespace tollgate::core {
namespace {

Limit Smooth(int64_t capacity, const char* per_second, Duration max_delay) {
  return Limit::Create({.algorithm = Algorithm::kTokenBucket,
                        .capacity = capacity,
                        .refill = Rate::Parse(per_second, 1).value(),
                        .max_delay = max_delay})
      .value();
}

TEST(Smoothing, RequestsBeyondTheBurstQueueOnTheRefillSchedule) {
  // 2 of burst, 10/s (a token every 100 ms), held up to 350 ms.
  const Limit l = Smooth(2, "10", Duration::Millis(350));
  State s;
  const Instant t0 = Instant::FromUnixSeconds(1'800'000'000);
  struct Step {
    int64_t at_ms;
    bool allowed;
    int64_t delay_ms;  // when allowed; when refused: the retry-after
  };
  const Step steps[] = {
      {0, true, 0},      {0, true, 0},                    // the burst
      {0, true, 100},    {0, true, 200}, {0, true, 300},  // queued, a token apart
      {0, false, 50},    // its slot (400 ms) is past 350 ms: refused, retry when 350 ms covers it
      {150, true, 250},  // 150 ms later: its slot is 400 ms, 250 ms from now
      {150, true, 350},  // the slot at 500 ms: exactly max_delay away, still admitted
      {150, false, 100},
  };
  for (const Step& step : steps) {
    const Decision d = l.Evaluate(s, 1, t0 + Duration::Millis(step.at_ms));
    EXPECT_EQ(d.allowed, step.allowed) << step.at_ms;
    if (d.allowed) {
      EXPECT_EQ(d.delay, Duration::Millis(step.delay_ms)) << step.at_ms;
      if (step.delay_ms > 0) {
        EXPECT_EQ(d.remaining, 0);
      }
    } else {
      EXPECT_EQ(d.code, RejectCode::kRateLimited);
      EXPECT_EQ(d.retry_after, Duration::Millis(step.delay_ms)) << step.at_ms;
      EXPECT_EQ(d.delay, Duration());
    }
  }
  // Once the schedule has drained, the bucket is a bucket again: full after 2 tokens' refill.
  const Decision later = l.Evaluate(s, 1, t0 + Duration::Seconds(2));
  EXPECT_TRUE(later.allowed);
  EXPECT_EQ(later.delay, Duration());
  EXPECT_EQ(later.remaining, 1);
}

TEST(Smoothing, ARequestThatMayNotBeHeldIsDecidedAsWithoutSmoothing) {
  const Limit l = Smooth(1, "1", Duration::Seconds(5));
  State s;
  const Instant t = Instant::FromUnixSeconds(1'800'000'000);
  EXPECT_TRUE(l.Evaluate(s, 1, t).allowed);
  const State before = s;
  const Decision refused = l.Evaluate(s, 1, t, /*may_delay=*/false);
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.retry_after, Duration::Seconds(1));
  EXPECT_EQ(s.a, before.a);  // nothing consumed
  const Decision held = l.Evaluate(s, 1, t);
  EXPECT_TRUE(held.allowed);
  EXPECT_EQ(held.delay, Duration::Seconds(1));
}

TEST(Smoothing, CostsAndTheStateExpireAfterTheDebtIsRepaid) {
  const Limit l = Smooth(10, "1", Duration::Seconds(3));
  State s;
  const Instant t = Instant::FromUnixSeconds(1'800'000'000);
  EXPECT_EQ(l.Evaluate(s, 10, t).delay, Duration());
  const Decision d = l.Evaluate(s, 3, t);  // 3 tokens, 3 s away
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.delay, Duration::Seconds(3));
  EXPECT_FALSE(l.Evaluate(s, 1, t).allowed);
  EXPECT_EQ(l.ExpiresAt(s), t + Duration::Seconds(13));                    // 13 tokens of deficit
  EXPECT_EQ(l.Evaluate(s, 11, t).code, RejectCode::kCostExceedsCapacity);  // never
}

TEST(Smoothing, OnlyTokenBucketsAndBoundedDelays) {
  EXPECT_FALSE(
      Limit::Create(
          {.capacity = 1, .refill = Rate::Parse("1", 1).value(), .max_delay = Duration::Micros(-1)})
          .ok());
  // The deficit must stay below 2^53 units with the debt.
  EXPECT_FALSE(Limit::Create({.capacity = 1,
                              .refill = Rate::Parse("1000000000", 1).value(),
                              .max_delay = Duration::Seconds(10'000'000)})
                   .ok());
}

}  // namespace
}  // namespace tollgate::core
