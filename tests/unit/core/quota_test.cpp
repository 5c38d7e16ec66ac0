#include <tollgate/core/quota.hpp>

#include <gtest/gtest.h>

namespace tollgate::core {
namespace {

const Instant kDay = Instant::FromUnixSeconds(DaysFromCivil({2026, 11, 29}) * 86'400);

TEST(Quota, AllowanceCountsNeverRejectsCeilingRejectsUntilMidnight) {
  const Quota q = Quota::Create(Period::kDay, 10, 100).value();
  State s;
  for (int i = 0; i < 100; ++i) {
    const Decision d = q.Evaluate(s, 1, kDay + Duration::Seconds(i));
    ASSERT_TRUE(d.allowed) << i;
    EXPECT_EQ(d.over_allowance, i >= 10);
    EXPECT_EQ(d.used, i + 1);
  }
  const Instant t = kDay + Duration::Seconds(86'399) + Duration::Millis(999);
  const Decision d = q.Evaluate(s, 1, t);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.code, RejectCode::kCeilingExceeded);
  EXPECT_EQ(d.retry_after, Duration::Millis(1));
  EXPECT_EQ(d.retry_after.CeilSeconds(), 1);
  EXPECT_EQ(d.limit, 10);
  EXPECT_EQ(d.remaining, 0);
  // 00:00 UTC: a new day.
  const Decision next = q.Evaluate(s, 1, kDay + Duration::Seconds(86'400));
  EXPECT_TRUE(next.allowed);
  EXPECT_EQ(next.used, 1);
}

TEST(Quota, HardQuotaWithoutAllowance) {
  const Quota q = Quota::Create(Period::kMonth, std::nullopt, 3).value();
  State s;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(q.Evaluate(s, 1, kDay).allowed);
  const Decision d = q.Evaluate(s, 1, kDay);
  EXPECT_EQ(d.code, RejectCode::kQuotaExceeded);
  EXPECT_EQ(d.retry_after, Duration::Seconds(86'400 * 2));  // to 1 December
}

TEST(Quota, UnlimitedIsMetered) {
  const Quota q = Quota::Create(Period::kDay, std::nullopt, std::nullopt).value();
  State s;
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(q.Evaluate(s, 7, kDay).allowed);
  EXPECT_EQ(s.b, 7000);
}

TEST(Quota, ExpiresAtPeriodEnd) {
  const Quota day = Quota::Create(Period::kDay, 1, std::nullopt).value();
  const Quota month = Quota::Create(Period::kMonth, 1, std::nullopt).value();
  State s;
  ASSERT_TRUE(day.Evaluate(s, 1, kDay).allowed);
  EXPECT_EQ(day.ExpiresAt(s), kDay + Duration::Seconds(86'400));
  State m;
  ASSERT_TRUE(month.Evaluate(m, 1, kDay).allowed);
  EXPECT_EQ(month.ExpiresAt(m), Instant::FromUnixSeconds(DaysFromCivil({2026, 12, 1}) * 86'400));
}

TEST(Quota, InvalidParameters) {
  EXPECT_EQ(Quota::Create(Period::kDay, 0, std::nullopt).error(), "allowance: must be > 0");
  EXPECT_EQ(Quota::Create(Period::kDay, 10, 5).error(), "ceiling: must be >= allowance");
  EXPECT_FALSE(Quota::Create(Period::kDay, std::nullopt, -1).ok());
}

}  // namespace
}  // namespace tollgate::core
