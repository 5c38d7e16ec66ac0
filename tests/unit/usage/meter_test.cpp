#include <tollgate/usage/meter.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <tollgate/core/calendar.hpp>

namespace tollgate::usage {
namespace {

using usage::Outcome;

core::Instant At(int y, int m, int d, int64_t s) {
  return core::Instant::FromUnixSeconds(core::DaysFromCivil({y, m, d}) * 86'400 + s);
}

std::vector<UsageRecord> QuerySync(UsageMeter& meter, std::string_view period,
                                   std::string account = "") {
  std::vector<UsageRecord> out;
  meter.Query(period, account, [&](core::Result<std::vector<UsageRecord>> r) {
    ASSERT_TRUE(r.ok()) << r.error();
    out = std::move(r).value();
  });
  return out;
}

TEST(UsageMeter, CountsByOutcomeClassAndRollsOverAtMidnightUtc) {
  usage::MemoryUsageBackend backend;
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

// What a backend is handed, flush by flush.
class RecordingBackend final : public usage::UsageBackend {
 public:
  void Add(const usage::UsageDeltas& deltas) override { adds.push_back(deltas); }
  void Read(std::vector<std::string>, std::string,
            std::function<void(core::Result<usage::UsageRows>)> done) override {
    done(usage::UsageRows{});
  }
  std::vector<usage::UsageDeltas> adds;
};

// Rows are kept from one flush to the next (zeroed), and dropped after an idle interval: each
// flush hands on exactly what was counted since the one before.
TEST(UsageMeter, EachFlushHandsOnOnlyWhatWasCountedSinceTheLast) {
  RecordingBackend backend;
  UsageMeter meter(backend);
  const core::Instant t = At(2026, 11, 29, 100);
  meter.Record("acme", "k1", Outcome::kSuccess, 3, t);
  meter.Record("acme", "k2", Outcome::kRejected, 1, t);
  meter.Flush();
  meter.Record("acme", "k1", Outcome::kSuccess, 2, t);
  meter.Flush();
  meter.Flush();  // nothing counted
  meter.Record("acme", "k2", Outcome::kSuccess, 5, t);
  meter.Record("acme", "k2", Outcome::kSuccess, 1, t);
  meter.Flush();

  ASSERT_EQ(backend.adds.size(), 4u);
  auto sorted = [](usage::UsageDeltas d) {
    std::sort(d.begin(), d.end(),
              [](const auto& a, const auto& b) { return a.first.key_id < b.first.key_id; });
    return d;
  };
  const auto first = sorted(backend.adds[0]);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].first.key_id, "k1");
  EXPECT_EQ(first[0].second.cost[0], 3);
  EXPECT_EQ(first[1].first.key_id, "k2");
  EXPECT_EQ(first[1].second.requests[static_cast<size_t>(Outcome::kRejected)], 1);
  ASSERT_EQ(backend.adds[1].size(), 1u);  // k2 idle: not sent again
  EXPECT_EQ(backend.adds[1][0].first.key_id, "k1");
  EXPECT_EQ(backend.adds[1][0].second.requests[0], 1);
  EXPECT_EQ(backend.adds[1][0].second.cost[0], 2);
  EXPECT_TRUE(backend.adds[2].empty());
  ASSERT_EQ(backend.adds[3].size(), 1u);  // k2 again after being dropped: counted from zero
  EXPECT_EQ(backend.adds[3][0].first.key_id, "k2");
  EXPECT_EQ(backend.adds[3][0].first.day, "2026-11-29");
  EXPECT_EQ(backend.adds[3][0].first.account, "acme");
  EXPECT_EQ(backend.adds[3][0].second.requests[0], 2);
  EXPECT_EQ(backend.adds[3][0].second.cost[0], 6);
  EXPECT_EQ(backend.adds[3][0].second.requests[static_cast<size_t>(Outcome::kRejected)], 0);
}

// Flushed in slices (the gateway: one of ten per 100 ms tick), each key goes once per round with
// all it counted since, the keys are spread evenly over the slices, and a full flush takes every
// slice.
TEST(UsageMeter, FlushedInSlicesEachKeyGoesOncePerRound) {
  constexpr size_t kSlices = 4, kKeys = 40;
  RecordingBackend backend;
  UsageMeter meter(backend, kSlices);
  const core::Instant t = At(2026, 11, 29, 100);
  for (int round = 0; round < 2; ++round) {
    for (size_t k = 0; k < kKeys; ++k) {
      for (int i = 0; i < 3; ++i)
        meter.Record("acme", "k" + std::to_string(k), Outcome::kSuccess, 1, t);
    }
    for (size_t slice = 0; slice < kSlices; ++slice) meter.Flush(slice);
  }
  ASSERT_EQ(backend.adds.size(), 2 * kSlices);
  for (size_t round = 0; round < 2; ++round) {
    std::map<std::string, int64_t> seen;
    for (size_t slice = 0; slice < kSlices; ++slice) {
      const auto& add = backend.adds[round * kSlices + slice];
      EXPECT_EQ(add.size(), kKeys / kSlices) << "round " << round << " slice " << slice;
      for (const auto& [key, counts] : add) seen[key.key_id] += counts.requests[0];
    }
    ASSERT_EQ(seen.size(), kKeys);
    for (const auto& [id, n] : seen) EXPECT_EQ(n, 3) << id;
  }
  // A round with nothing counted drops every row; rows made afresh go out whole.
  for (size_t slice = 0; slice < kSlices; ++slice) meter.Flush(slice);
  for (size_t slice = 0; slice < kSlices; ++slice)
    EXPECT_TRUE(backend.adds[2 * kSlices + slice].empty());
  meter.Record("acme", "k1", Outcome::kSuccess, 1, t);
  meter.Record("acme", "k2", Outcome::kSuccess, 1, t);
  meter.Record("acme", "k2", Outcome::kSuccess, 1, t);
  meter.Flush();
  auto last = backend.adds.back();
  std::sort(last.begin(), last.end(),
            [](const auto& a, const auto& b) { return a.first.key_id < b.first.key_id; });
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[0].first.key_id, "k1");
  EXPECT_EQ(last[0].second.requests[0], 1);
  EXPECT_EQ(last[1].first.key_id, "k2");
  EXPECT_EQ(last[1].second.requests[0], 2);
}

// A tag finds its key's row without hashing while the row lasts. Once the row is dropped (and
// perhaps reused by another key), or the day turns, or another key comes with the same address
// in another epoch (a Key's address reused after a reload), the entry no longer matches, and the
// counts still go to the row the strings name.
TEST(UsageMeter, ATagNeverCountsForAnotherKeyOrDayOrIntoADroppedRow) {
  usage::MemoryUsageBackend backend;
  UsageMeter meter(backend);
  const int key_a = 0, key_b = 0;  // their addresses are the tags
  const MeterTag a{&key_a, 1};
  const MeterTag b{&key_b, 1};
  const MeterTag a_later{&key_a, 2};  // the same address, another epoch: another key
  const core::Instant t = At(2026, 11, 29, 100);
  auto drop_idle_rows = [&] {
    meter.Flush();  // sent; the rows stay, at zero
    meter.Flush();  // zero for a whole interval: dropped
  };
  meter.Record("acme", "ka", Outcome::kSuccess, 1, t, a);
  meter.Record("acme", "ka", Outcome::kSuccess, 1, t, a);  // through the cache
  drop_idle_rows();
  meter.Record("acme", "ka", Outcome::kSuccess, 100, t, a);  // its row was dropped
  drop_idle_rows();
  meter.Record("bolt", "kb", Outcome::kSuccess, 10, t, b);        // reuses ka's row
  meter.Record("acme", "ka", Outcome::kSuccess, 1000, t, a);      // ... which is kb's now
  meter.Record("other", "ka", Outcome::kSuccess, 7, t, a_later);  // after a reload
  meter.Record("acme", "kz", Outcome::kSuccess, 3, t, {&key_a, 3});
  meter.Record("acme", "ka", Outcome::kSuccess, 1, t, a);                    // the first again
  meter.Record("acme", "ka", Outcome::kSuccess, 5, At(2026, 11, 30, 0), a);  // the next day
  std::map<std::string, int64_t> cost;
  for (const auto& r : QuerySync(meter, "2026-11-29"))
    cost[r.account + "/" + r.key_id] += r.counts.cost[0];
  EXPECT_EQ(cost, (std::map<std::string, int64_t>{
                      {"acme/ka", 1103}, {"acme/kz", 3}, {"bolt/kb", 10}, {"other/ka", 7}}));
  const auto next = QuerySync(meter, "2026-11-30");
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].counts.cost[0], 5);
}

// Many keys: each one's counts stay its own whether its tag's entry is its own or another's
// (16,384 entries, 40,000 keys: most entries are shared).
TEST(UsageMeter, ManyTagsSharingCacheEntriesCountEachKeyExactly) {
  usage::MemoryUsageBackend backend;
  UsageMeter meter(backend, 10);
  std::vector<char> keys(40'000);
  const core::Instant t = At(2026, 11, 29, 100);
  for (int round = 1; round <= 3; ++round) {
    for (size_t i = 0; i < keys.size(); ++i) {
      meter.Record("acct" + std::to_string(i % 7), "k" + std::to_string(i), Outcome::kSuccess,
                   static_cast<int64_t>(i % 5) + 1, t, MeterTag{&keys[i], 1});
    }
    meter.Flush(static_cast<size_t>(round) % 10);  // some rows go out between the rounds
  }
  const auto records = QuerySync(meter, "2026-11-29");
  ASSERT_EQ(records.size(), keys.size());
  for (const auto& r : records) {
    const size_t i = std::stoul(r.key_id.substr(1));
    EXPECT_EQ(r.account, "acct" + std::to_string(i % 7));
    EXPECT_EQ(r.counts.requests[0], 3) << r.key_id;
    EXPECT_EQ(r.counts.cost[0], 3 * (static_cast<int64_t>(i % 5) + 1)) << r.key_id;
  }
}

TEST(UsageMeter, CsvAndJsonExports) {
  usage::MemoryUsageBackend backend;
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
  usage::MemoryUsageBackend backend(2);
  auto row = [](const char* day, const char* key) {
    usage::UsageDeltas rows(1);
    rows[0].first = usage::UsageKey{day, "acme", key};
    rows[0].second.requests[0] = 1;
    return rows;
  };
  backend.Add(row("2026-11-27", "k1"));
  backend.Add(row("2026-11-28", "k1"));
  backend.Add(row("2026-11-28", "k2"));
  backend.Add(row("2026-11-29", "k1"));  // a third day: the oldest goes
  backend.Add(row("2026-11-29", "k1"));
  auto read = [&backend](std::vector<std::string> days) {
    usage::UsageRows out;
    backend.Read(std::move(days), "",
                 [&out](core::Result<usage::UsageRows> r) { out = std::move(r).value(); });
    return out;
  };
  EXPECT_TRUE(read({"2026-11-27"}).empty());
  EXPECT_EQ(read({"2026-11-28"}).size(), 2u);
  const auto today = read({"2026-11-29"});
  ASSERT_EQ(today.size(), 1u);
  EXPECT_EQ(today.begin()->second.requests[0], 2);
}

}  // namespace tollgate::usage
