#include <tollgate/core/calendar.hpp>

#include <gtest/gtest.h>

namespace tollgate::core {
namespace {

Instant At(int64_t y, int m, int d, int64_t seconds_into_day = 0) {
  return Instant::FromUnixSeconds(DaysFromCivil({y, m, d}) * 86'400 + seconds_into_day);
}

TEST(Calendar, CivilRoundTrip) {
  EXPECT_EQ(DaysFromCivil({1970, 1, 1}), 0);
  EXPECT_EQ(DaysFromCivil({2000, 3, 1}), 11'017);
  for (int64_t d = -1000; d < 200'000; d += 7) ASSERT_EQ(DaysFromCivil(CivilFromDays(d)), d);
}

TEST(Calendar, DayRollsOverAtMidnightUtc) {
  const Instant last = At(2026, 11, 29, 86'399) + Duration::Millis(999);  // 23:59:59.999
  const Instant midnight = At(2026, 11, 30);
  EXPECT_NE(PeriodIndex(Period::kDay, last), PeriodIndex(Period::kDay, midnight));
  EXPECT_EQ(PeriodEnd(Period::kDay, last), midnight);
  EXPECT_EQ(PeriodEnd(Period::kDay, last) - last, Duration::Millis(1));
  EXPECT_EQ(PeriodLabel(Period::kDay, last), "2026-11-29");
  EXPECT_EQ(PeriodLabel(Period::kDay, midnight), "2026-11-30");
}

TEST(Calendar, MonthEndsAcrossLengthsAndLeapYears) {
  EXPECT_EQ(PeriodEnd(Period::kMonth, At(2026, 1, 31, 86'399)), At(2026, 2, 1));
  EXPECT_EQ(PeriodEnd(Period::kMonth, At(2026, 2, 15)), At(2026, 3, 1));
  EXPECT_EQ(PeriodEnd(Period::kMonth, At(2028, 2, 29, 86'399)), At(2028, 3, 1));
  EXPECT_EQ(PeriodEnd(Period::kMonth, At(2026, 12, 31, 86'399)), At(2027, 1, 1));
  EXPECT_EQ(PeriodSeconds(Period::kMonth, At(2026, 2, 10)), 28 * 86'400);
  EXPECT_EQ(PeriodSeconds(Period::kMonth, At(2028, 2, 10)), 29 * 86'400);
  EXPECT_EQ(PeriodSeconds(Period::kMonth, At(2100, 2, 10)), 28 * 86'400);  // not a leap year
  EXPECT_EQ(PeriodSeconds(Period::kMonth, At(2000, 2, 10)), 29 * 86'400);  // a leap year
  EXPECT_EQ(PeriodSeconds(Period::kMonth, At(2026, 4, 30)), 30 * 86'400);
  EXPECT_EQ(PeriodSeconds(Period::kDay, At(2026, 4, 30)), 86'400);
  EXPECT_EQ(PeriodLabel(Period::kMonth, At(2026, 11, 29)), "2026-11");
}

TEST(Calendar, TwentyNinthOfFebruary) {
  const Instant feb29 = At(2028, 2, 29, 12 * 3600);
  EXPECT_EQ(CivilFromDays(DaysFromCivil({2028, 2, 29})), (CivilDate{2028, 2, 29}));
  EXPECT_EQ(PeriodEnd(Period::kDay, feb29), At(2028, 3, 1));
  EXPECT_EQ(PeriodIndex(Period::kMonth, feb29), PeriodIndex(Period::kMonth, At(2028, 2, 1)));
  EXPECT_NE(PeriodIndex(Period::kMonth, feb29), PeriodIndex(Period::kMonth, At(2028, 3, 1)));
}

}  // namespace
}  // namespace tollgate::core
