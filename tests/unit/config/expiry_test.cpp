// An override's `expires` (YAML keys and PostgreSQL's overrides column): exactly a UTC date or
// time that exists. Every spelling a hand-written row or a tool might produce.
#include <gtest/gtest.h>
#include <tollgate/config/config.hpp>
#include <tollgate/core/calendar.hpp>

namespace tollgate::config {
namespace {

const PlanConfig& Plan() {
  static const Config c = ParseConfig(R"(
plans:
  free:
    limits:
      - {name: burst, capacity: 20, refill_per_second: 1}
)")
                              .value();
  return c.plans[0];
}

core::Result<std::vector<OverrideConfig>> WithExpiry(const std::string& expires) {
  return ParseOverrides({{"burst", {{"capacity", "5"}, {"expires", expires}}}}, Plan());
}

TEST(OverrideExpiry, AcceptsExactDatesAndTimesThatExist) {
  struct Case {
    const char* text;
    core::CivilDate date;
    int64_t seconds_of_day;
  };
  const Case cases[] = {
      {"2026-12-31", {2026, 12, 31}, 0},         {"2026-12-31T23:59:59Z", {2026, 12, 31}, 86'399},
      {"2028-02-29", {2028, 2, 29}, 0},  // a leap year
      {"2026-01-01T00:00:00Z", {2026, 1, 1}, 0}, {"2000-02-29T12:30:00Z", {2000, 2, 29}, 45'000},
  };
  for (const Case& c : cases) {
    auto o = WithExpiry(c.text);
    ASSERT_TRUE(o.ok()) << c.text << ": " << o.error();
    EXPECT_EQ((*o)[0].expires_unix_s, core::DaysFromCivil(c.date) * 86'400 + c.seconds_of_day)
        << c.text;
  }
}

TEST(OverrideExpiry, RefusesEverythingElseNamingTheField) {
  const char* bad[] = {
      "2026-02-30",
      "2026-02-29",
      "2100-02-29",  // no such day
      "2026-13-01",
      "2026-00-10",
      "2026-04-31",
      "2026-12-00",
      "2026-12-31T24:00:00Z",
      "2026-12-31T23:60:00Z",
      "2026-12-31T23:59:60Z",  // no such time
      "2026-12-31T-1:00:00Z",
      "2026-12-31T23:-5:00Z",
      "-026-12-31",  // signs
      "2026-12-31T23:00:00",
      "2026-12-31T23:00:00+01:00",
      "2026-12-31 23:00:00Z",  // zones
      "2026-12-31Z",
      "2026-12-31T23:00Z",
      "26-12-31",
      "2026-1-31",
      "2026/12/31",
      " 2026-12-31",
      "2026-12-31 ",
      "2026-12-31\n",
      "",
      "soon",
      "1798761600",
      "２０２６-12-31",
      "2026-12-31T23:00:00ZZ",
      "+2026-12-31",
  };
  for (const char* text : bad) {
    auto o = WithExpiry(text);
    ASSERT_FALSE(o.ok()) << text;
    EXPECT_NE(o.error().find("burst.expires: must be a UTC date"), std::string::npos)
        << text << ": " << o.error();
  }
}

}  // namespace
}  // namespace tollgate::config
