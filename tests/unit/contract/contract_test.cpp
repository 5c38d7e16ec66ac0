#include <tollgate/contract/contract.hpp>

#include <map>

#include <gtest/gtest.h>

#include "support/limits.hpp"

namespace tollgate::contract {
namespace {

using core::Decision;
using core::Duration;
using testing::Bucket;

std::map<std::string, std::string> ToMap(const HeaderList& h) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : h.Pairs()) m[k] = v;
  return m;
}

class ContractTest : public ::testing::Test {
 protected:
  core::Limit burst_ = Bucket(20, "0.5");
  core::Limit daily_ =
      core::Limit::Create(
          {.algorithm = core::Algorithm::kQuota, .allowance = 1000, .ceiling = 10000})
          .value();
  std::vector<store::Check> checks_ = {{"burst", &burst_, 1, true}, {"daily", &daily_, 1, true}};
  config::HeadersConfig all_{true, true, true};
};

TEST_F(ContractTest, AllowedCarriesIetfAndLegacyHeaders) {
  std::vector<Decision> d(2);
  d[0] = {.allowed = true, .limit = 20, .remaining = 7, .reset = Duration::Seconds(26)};
  d[1] = {.allowed = true, .limit = 1000, .remaining = 990, .reset = Duration::Millis(3'600'500)};
  engine::Verdict v = engine::Combine(checks_, d);
  v.now = core::Instant::FromUnixSeconds(1'790'000'000);
  HeaderList h;
  AppendRateLimitHeaders(all_, checks_, d, v, h);
  auto m = ToMap(h);
  EXPECT_EQ(m["RateLimit-Policy"], "\"burst\";q=20;w=40, \"daily\";q=1000;w=86400");
  // t: until more quota is made available (draft -10): the bucket's next token, 2 s (0.5/s,
  // 13 missing: full in 26 s), not when it is full; the quota's period end.
  EXPECT_EQ(m["RateLimit"], "\"burst\";r=7;t=2, \"daily\";r=990;t=3601");
  EXPECT_EQ(m["RateLimit-Limit"], "20");
  EXPECT_EQ(m["RateLimit-Remaining"], "7");
  EXPECT_EQ(m["RateLimit-Reset"], "2");
  EXPECT_EQ(m["X-RateLimit-Reset"], "2");
  EXPECT_EQ(m["X-RateLimit-Remaining"], "7");
  EXPECT_EQ(m.count("Retry-After"), 0u);
}

TEST_F(ContractTest, RejectionCarriesRetryAfterAndProblemBody) {
  std::vector<Decision> d(2);
  d[0] = {.allowed = false,
          .code = core::RejectCode::kRateLimited,
          .limit = 20,
          .remaining = 0,
          .reset = Duration::Seconds(40),
          .retry_after = Duration::Millis(1500)};
  d[1] = {.allowed = true, .limit = 1000, .remaining = 990};
  const engine::Verdict v = engine::Combine(checks_, d);
  HeaderList h;
  AppendRateLimitHeaders(all_, checks_, d, v, h);
  auto m = ToMap(h);
  // Retry-After, the Reset fields and the rejecting policy's t all say 2 (not the 40 s until
  // the bucket is full, which a client following the draft would wait).
  EXPECT_EQ(m["Retry-After"], "2");
  EXPECT_EQ(m["RateLimit-Remaining"], "0");
  EXPECT_EQ(m["RateLimit-Reset"], "2");
  EXPECT_EQ(m["X-RateLimit-Reset"], "2");
  EXPECT_EQ(m["RateLimit"], "\"burst\";r=0;t=2, \"daily\";r=990;t=0");
  const std::string body = RejectionBody(checks_, d, v);
  EXPECT_NE(body.find("\"code\":\"rate_limited\""), std::string::npos);
  EXPECT_NE(body.find("\"violated-policies\":[\"burst\"]"), std::string::npos);
}

TEST_F(ContractTest, CostAboveCapacityHasNoRetryAfter) {
  std::vector<Decision> d(2);
  d[0] = {.allowed = false,
          .code = core::RejectCode::kCostExceedsCapacity,
          .limit = 20,
          .remaining = 20,
          .retry_after = Duration::Infinite()};
  d[1] = {.allowed = true, .limit = 1000, .remaining = 990};
  const engine::Verdict v = engine::Combine(checks_, d);
  HeaderList h;
  AppendRateLimitHeaders(all_, checks_, d, v, h);
  EXPECT_EQ(ToMap(h).count("Retry-After"), 0u);
  EXPECT_NE(RejectionBody(checks_, d, v).find("cost_exceeds_capacity"), std::string::npos);
}

TEST_F(ContractTest, ShadowChecksAreNotAdvertisedAndSetsAreConfigurable) {
  checks_[1].enforced = false;
  std::vector<Decision> d(2);
  d[0] = {.allowed = true, .limit = 20, .remaining = 3};
  d[1] = {.allowed = false, .limit = 1000};
  const engine::Verdict v = engine::Combine(checks_, d);
  HeaderList h;
  AppendRateLimitHeaders({.ietf = true, .ratelimit = false, .x_ratelimit = false}, checks_, d, v,
                         h);
  auto m = ToMap(h);
  EXPECT_EQ(m["RateLimit-Policy"], "\"burst\";q=20;w=40");
  EXPECT_EQ(m.count("RateLimit-Limit"), 0u);
  EXPECT_EQ(m.count("X-RateLimit-Limit"), 0u);
}

// The escaper the contract's bodies go through (util/json_escape.hpp).
using util::JsonEscape;

TEST(Contract, JsonEscape) {
  EXPECT_EQ(JsonEscape("a\"b\\c\n"), "a\\\"b\\\\c\\u000a");
  EXPECT_EQ(JsonEscape("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");  // UTF-8 kept
}

// Regression: raw bytes from a request target made access-log lines that were not JSON.
TEST(Contract, JsonEscapeReplacesInvalidUtf8) {
  EXPECT_EQ(JsonEscape("/\xc3\x28"), "/\\ufffd(");
  EXPECT_EQ(JsonEscape("\xff\xfe"), "\\ufffd\\ufffd");
  EXPECT_EQ(JsonEscape("\xe2\x82"), "\\ufffd\\ufffd");             // truncated sequence
  EXPECT_EQ(JsonEscape("\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd");  // a surrogate
  EXPECT_EQ(JsonEscape("\xc0\xaf"), "\\ufffd\\ufffd");             // overlong
}

}  // namespace
TEST(HeaderListTest, RendersAnHttpHeaderBlockAndReadsBack) {
  HeaderList h;
  h.Add("RateLimit", "\"burst\";r=7;t=26");
  h.Add("Retry-After", int64_t{-3});
  EXPECT_EQ(h.Rendered(), "RateLimit: \"burst\";r=7;t=26\r\nRetry-After: -3\r\n");
  EXPECT_TRUE(h.Has("retry-after"));
  EXPECT_TRUE(h.Has("RATELIMIT"));
  EXPECT_FALSE(h.Has("RateLimit-Limit"));
  EXPECT_FALSE(h.Has("Retry"));
  const auto pairs = h.Pairs();
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0], std::make_pair(std::string("RateLimit"), std::string("\"burst\";r=7;t=26")));
  EXPECT_EQ(pairs[1], std::make_pair(std::string("Retry-After"), std::string("-3")));
  EXPECT_FALSE(HeaderList().Has("x"));
}

// Names are found where they are even when the writer's buffer filled up between headers.
TEST(HeaderListTest, WriterKeepsNamesAcrossBufferFlushes) {
  HeaderList h;
  h.Add("First", "1");
  const std::string long_value(3000, 'v');
  {
    HeaderList::Writer w(h);
    w.Add("Long", long_value);
    w.Add("After-Long", int64_t{42});
    w.AddWith("Built", [](util::StringAppender& out) {
      out << "a=" << -7 << ";b=" << uint64_t{18446744073709551615u};
    });
  }
  EXPECT_EQ(h.Rendered(), "First: 1\r\nLong: " + long_value +
                              "\r\nAfter-Long: 42\r\nBuilt: a=-7;b=18446744073709551615\r\n");
  EXPECT_TRUE(h.Has("after-long"));
  EXPECT_TRUE(h.Has("BUILT"));
  EXPECT_FALSE(h.Has("v"));
  ASSERT_EQ(h.Pairs().size(), 4u);
  EXPECT_EQ(h.Pairs()[2].first, "After-Long");
}

// Has() first looks at a mask of the names' sizes: names of any size, the same size as
// another, and a list cleared and reused.
TEST(HeaderListTest, FindsNamesOfEverySizeAndForgetsThemWhenCleared) {
  HeaderList h;
  const std::string long_name(70, 'N');
  h.Add(long_name, "1");
  h.Add("Abc", "2");
  EXPECT_TRUE(h.Has(std::string(70, 'n')));
  EXPECT_FALSE(h.Has(std::string(69, 'N')));
  EXPECT_FALSE(h.Has(std::string(71, 'N')));
  EXPECT_TRUE(h.Has("aBC"));
  EXPECT_FALSE(h.Has("Abd"));
  EXPECT_FALSE(h.Has(""));
  h.Clear();
  EXPECT_FALSE(h.Has("Abc"));
  EXPECT_FALSE(h.Has(long_name));
  h.Add("Xyz", "3");
  EXPECT_FALSE(h.Has("Abc"));
  EXPECT_TRUE(h.Has("XYZ"));
}

TEST(StringAppenderTest, GivesTheConcatenationWhateverThePieceSizes) {
  std::string out = "prefix:";
  std::string expected = out;
  {
    util::StringAppender a(out);
    for (int i = 0; i < 400; ++i) {
      const std::string piece(static_cast<size_t>(i * 7 % 1500), static_cast<char>('a' + i % 26));
      a << piece << i << INT64_MIN;
      expected += piece + std::to_string(i) + std::to_string(INT64_MIN);
      EXPECT_EQ(a.size(), expected.size());
    }
  }
  EXPECT_EQ(out, expected);
}

}  // namespace tollgate::contract
