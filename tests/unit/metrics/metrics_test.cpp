#include <tollgate/metrics/metrics.hpp>

#include <atomic>
#include <string>

#include <gtest/gtest.h>
#include <tollgate/store/memory_store.hpp>

#include "support/fake_clock.hpp"

namespace tollgate::metrics {
namespace {

TEST(Label, EscapesWhatTheTextFormatRequires) {
  struct Case {
    const char* value;
    const char* rendered;
  };
  const Case cases[] = {
      {"free", R"(plan="free")"},
      {"", R"(plan="")"},
      {R"(a"b)", R"(plan="a\"b")"},
      {R"(a\b)", R"(plan="a\\b")"},
      {"a\nb", R"(plan="a\nb")"},
      {R"(\")", R"(plan="\\\"")"},
      {"\xc3\xa9t\xc3\xa9", "plan=\"\xc3\xa9t\xc3\xa9\""},  // UTF-8 as it is
  };
  for (const Case& c : cases) EXPECT_EQ(Label("plan", c.value), c.rendered) << c.value;
}

TEST(Registry, ReadValuesCarryTheirTypeAndAreReadWhenRendered) {
  Registry registry;
  std::atomic<uint64_t> hits{3};
  std::atomic<int> open{1};
  registry.CounterFrom("test_hits_total", "Hits.", ReadOf(hits));
  registry.Gauge("test_open", "Open things.", ReadOf(open));
  hits = 7;
  const std::string text = registry.Render();
  EXPECT_NE(text.find("# TYPE test_hits_total counter\ntest_hits_total 7\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE test_open gauge\ntest_open 1\n"), std::string::npos) << text;
}

TEST(Registry, EveryTotalIsACounter) {
  // What the components declare: no family named *_total is typed as a gauge.
  Registry registry;
  testing::FakeClock clock;
  store::MemoryStore memory({.max_keys = 16, .shards = 1}, clock);
  memory.ExportMetrics(registry);
  registry.Counter("tollgate_requests_total", Label("class", "2xx")).fetch_add(1);
  const std::string text = registry.Render();
  EXPECT_NE(text.find("# TYPE tollgate_store_evictions_total counter"), std::string::npos);
  EXPECT_NE(text.find("# TYPE tollgate_store_keys gauge"), std::string::npos);
  size_t at = 0;
  while ((at = text.find("# TYPE ", at)) != std::string::npos) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    if (line.find("_total ") != std::string::npos) {
      EXPECT_NE(line.find(" counter"), std::string::npos) << line;
    }
    at = end;
  }
}

TEST(LabelValue, ReadsBackWhatLabelRendered) {
  const char* values[] = {"free", "", R"(a"b)", R"(a\b)", "a\nb", R"(\")", "x=\"y", "<img src=x>"};
  for (const char* v : values) {
    const std::string labels =
        Label("check", "burst") + "," + Label("plan", v) + "," + Label("result", "allowed");
    EXPECT_EQ(LabelValue(labels, "plan"), std::string(v)) << labels;
    EXPECT_EQ(LabelValue(labels, "result"), "allowed") << labels;
  }
  EXPECT_EQ(LabelValue(R"(plan="free")", "code"), std::nullopt);
  EXPECT_EQ(LabelValue(R"(xplan="free")", "plan"), std::nullopt);
  EXPECT_EQ(LabelValue("", "plan"), std::nullopt);
}

TEST(Registry, SamplesListOneFamilyWithTheirLabels) {
  Registry registry;
  registry.Counter("tollgate_rejections_total", R"(plan="free",code="rate_limited")") += 3;
  registry.Counter("tollgate_rejections_total", R"(plan="team",code="quota_exceeded")") += 1;
  registry.Counter("tollgate_rejections_total_other", R"(plan="free")") += 9;
  registry.Counter("tollgate_rejections") += 5;
  const auto samples = registry.Samples("tollgate_rejections_total");
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].labels, R"(plan="free",code="rate_limited")");
  EXPECT_EQ(samples[0].value, 3u);
  EXPECT_EQ(samples[1].value, 1u);
  EXPECT_TRUE(registry.Samples("tollgate_missing_total").empty());
}

}  // namespace
}  // namespace tollgate::metrics
