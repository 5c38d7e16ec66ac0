#include <tollgate/engine/usage_meter.hpp>

#include <gtest/gtest.h>

#include <tollgate/core/calendar.hpp>

namespace tollgate::engine {
namespace {

using store::Outcome;

core::Instant At(int y, int m, int d, int64_t s) {
  return core::Instant::FromUnixSeconds(core::DaysFromCivil({y, m, d}) * 86'400 + s);
}

std::vector<UsageRecord> QuerySync(UsageMeter& meter, std::string_view period, std::string account = "") {
  std::vector<UsageRecord> out;
  meter.Query(period, account, [&](core::Result<std::vector<UsageRecord>> r) {
    ASSERT_TRUE(r.ok()) << r.error();
    out = std::move(r).value();
  });
  return out;
}

TEST(UsageMeter, CountsByOutcomeClassAndRollsOverAtMidnightUtc) {
  store::MemoryUsageBackend backend;
  UsageMeter meter(backend);
  const core::Instant last = At(2026, 11, 29, 86'399) + core::Duration::Millis(999);
  meter.Record("acme", "k1", Outcome::kSuccess, 3, last);
  meter.Record("acme", "k1", Outcome::kClientError, 1, last);
  meter.Record("acme", "k1", Outcome::kRejected, 1, last);
  meter.Record("acme", "k1", Outcome::kSuccess, 2, At(2026, 11, 30, 0));  // the next day
  meter.Record("other", "k9", Outcome::kServerError, 1, last);

  const auto day = QuerySync(meter, "2026-11-29");
  ASSERT_EQ(day.size(), 2u);
  EXPECT_EQ(day[0].account, "acme");
  EXPECT_EQ(day[0].counts.requests[0], 1);
  EXPECT_EQ(day[0].counts.cost[0], 3);
  EXPECT_EQ(day[0].counts.requests[1], 1);
  EXPECT_EQ(day[0].counts.requests[3], 1);
  EXPECT_EQ(day[1].counts.requests[2], 1);

  const auto next = QuerySync(meter, "2026-11-30", "acme");
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].counts.cost[0], 2);

  const auto month = QuerySync(meter, "2026-11", "acme");
  ASSERT_EQ(month.size(), 1u);
  EXPECT_EQ(month[0].counts.cost[0], 5);
  EXPECT_EQ(month[0].period, "2026-11");
  EXPECT_TRUE(QuerySync(meter, "2026-12").empty());
}

TEST(UsageMeter, CsvAndJsonExports) {
  store::MemoryUsageBackend backend;
  UsageMeter meter(backend);
  meter.Record("acme", "k1", Outcome::kSuccess, 3, At(2026, 11, 2, 10));
  const std::string csv = UsageCsv(QuerySync(meter, "2026-11"));
  EXPECT_EQ(csv,
            "period,account,key_id,success_requests,client_error_requests,server_error_requests,"
            "rejected_requests,success_cost,client_error_cost,server_error_cost,rejected_cost\n"
            "2026-11,acme,k1,1,0,0,0,3,0,0,0\n");
  EXPECT_NE(UsageJson(QuerySync(meter, "2026-11")).find("\"success\":{\"requests\":1,\"cost\":3}"),
            std::string::npos);
}

TEST(UsageMeter, PeriodsAreValidated) {
  EXPECT_EQ(DaysOfPeriod("2028-02")->size(), 29u);
  EXPECT_EQ(DaysOfPeriod("2026-02")->size(), 28u);
  EXPECT_EQ(DaysOfPeriod("2026-11-29")->at(0), "2026-11-29");
  EXPECT_FALSE(DaysOfPeriod("2026-13").ok());
  EXPECT_FALSE(DaysOfPeriod("2026-02-30").ok());
  EXPECT_FALSE(DaysOfPeriod("november").ok());
}

}  // namespace
TEST(MemoryUsageBackend, KeepsTheNewestDaysOnly) {
  store::MemoryUsageBackend backend(2);
  auto row = [](const char* day, const char* key) {
    store::UsageDeltas rows(1);
    rows[0].first = store::UsageKey{day, "acme", key};
    rows[0].second.requests[0] = 1;
    return rows;
  };
  backend.Add(row("2026-11-27", "k1"));
  backend.Add(row("2026-11-28", "k1"));
  backend.Add(row("2026-11-28", "k2"));
  backend.Add(row("2026-11-29", "k1"));  // a third day: the oldest goes
  backend.Add(row("2026-11-29", "k1"));
  auto read = [&backend](std::vector<std::string> days) {
    store::UsageRows out;
    backend.Read(std::move(days), "", [&out](core::Result<store::UsageRows> r) { out = std::move(r).value(); });
    return out;
  };
  EXPECT_TRUE(read({"2026-11-27"}).empty());
  EXPECT_EQ(read({"2026-11-28"}).size(), 2u);
  const auto today = read({"2026-11-29"});
  ASSERT_EQ(today.size(), 1u);
  EXPECT_EQ(today.begin()->second.requests[0], 2);
}

}  // namespace tollgate::engine
