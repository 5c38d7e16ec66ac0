#include "replay/log_line.hpp"

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace tollgate::replay {
namespace {

// A line as Worker::Finish writes it (src/http/exchange.cpp).
const std::string kGood =
    R"({"ts":"2026-11-29T21:59:56.123Z","method":"GET","path":"/v1/export","query":"pages=120",)"
    R"("status":429,"client":"203.0.113.9","peer":"10.0.0.2","request_id":"r-1",)"
    R"("key_id":"k-free","plan":"free","route":"export","decision":"rejected","cost":3,)"
    R"("upstream_status":0,"latency_ms":0.042})";

const char* Parse(std::string_view line, LogLine& out) {
  static std::string scratch;
  return ParseLogLine(line, out, scratch);
}

TEST(LogLine, ReadsTheGatewaysLine) {
  LogLine l;
  ASSERT_EQ(Parse(kGood, l), nullptr);
  EXPECT_EQ(l.ts, "2026-11-29T21:59:56.123Z");
  EXPECT_EQ(l.ts_micros, 1'795'989'596'123'000);
  EXPECT_EQ(l.method, "GET");
  EXPECT_EQ(l.path, "/v1/export");
  EXPECT_EQ(l.query, "pages=120");
  EXPECT_EQ(l.status, 429);
  EXPECT_EQ(l.client, "203.0.113.9");
  EXPECT_EQ(l.key_id, "k-free");
  EXPECT_EQ(l.route, "export");
  EXPECT_EQ(l.decision, "rejected");
  EXPECT_EQ(l.latency_us, 42);
  EXPECT_EQ(l.decided_us, 0);  // a line written before `decided_us`
  EXPECT_EQ(l.DecidedMicros(), 1'795'989'596'123'000 - 42);
}

// Issue 31: the decision's own time, to the microsecond (`ts` is the end, to the millisecond).
TEST(LogLine, ReadsTheDecisionTime) {
  std::string line = kGood;
  line.insert(line.size() - 1, R"(,"decided_us":1795989596000007)");
  LogLine l;
  ASSERT_EQ(Parse(line, l), nullptr);
  EXPECT_EQ(l.decided_us, 1'795'989'596'000'007);
  EXPECT_EQ(l.DecidedMicros(), 1'795'989'596'000'007);
  for (const char* bad :
       {"\"1795989596000007\"", "-5", "0", "1.5", "1e15", "null", "99999999999999999999"}) {
    std::string b = kGood;
    b.insert(b.size() - 1, std::string(R"(,"decided_us":)") + bad);
    const char* error = Parse(b, l);
    ASSERT_NE(error, nullptr) << b;
    EXPECT_EQ(std::string(error), "decided_us: not an integer") << b;
  }
  std::string twice = line;
  twice.insert(twice.size() - 1, R"(,"decided_us":1)");
  EXPECT_NE(Parse(twice, l), nullptr);
}

TEST(LogLine, QueryAndLatencyAreOptionalOthersRequired) {
  LogLine l;
  ASSERT_EQ(Parse(R"({"ts":"2026-01-01T00:00:00.000Z","method":"GET","path":"/","status":200,)"
                  R"("client":"c","key_id":"","route":"","decision":"none"})",
                  l),
            nullptr);
  EXPECT_EQ(l.query, "");
  EXPECT_EQ(l.latency_us, 0);
  for (std::string member :
       {"ts", "method", "path", "status", "client", "key_id", "route", "decision"}) {
    std::string line = kGood;
    const size_t at = line.find("\"" + member + "\":");
    ASSERT_NE(at, std::string::npos) << member;
    line.replace(at + 1, member.size(), "x" + member);  // renamed: an unknown member, skipped
    const char* error = Parse(line, l);
    ASSERT_NE(error, nullptr) << member;
    EXPECT_EQ(std::string(error), "missing member: " + member);
  }
}

TEST(LogLine, DecodesEscapes) {
  LogLine l;
  std::string line = kGood;
  line.replace(line.find("\"k-free\""), 8, R"("a\"b\\c\/\b\f\n\r\t\u00e9\u20ac\ud83d\ude00")");
  ASSERT_EQ(Parse(line, l), nullptr);
  EXPECT_EQ(l.key_id, "a\"b\\c/\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  // The views of the other members (some escaped too) stay valid beside it.
  line.replace(line.find("\"GET\""), 5, R"("G\u0045T")");
  ASSERT_EQ(Parse(line, l), nullptr);
  EXPECT_EQ(l.method, "GET");
  EXPECT_EQ(l.key_id, "a\"b\\c/\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  EXPECT_EQ(l.path, "/v1/export");
}

TEST(LogLine, EveryTruncationIsRefused) {
  LogLine l;
  for (size_t n = 0; n < kGood.size(); ++n) {
    EXPECT_NE(Parse(std::string_view(kGood).substr(0, n), l), nullptr) << n;
  }
}

TEST(LogLine, RefusesBadEscapes) {
  LogLine l;
  for (std::string bad : {R"("\x")", R"("\u12G4")", R"("\u12")", R"("\ud800")", R"("\udc00")",
                          R"("\ud800\u0041")", R"("\ud800x")", R"("\)"}) {
    std::string line = kGood;
    line.replace(line.find("\"k-free\""), 8, bad);
    EXPECT_NE(Parse(line, l), nullptr) << bad;
  }
}

TEST(LogLine, RefusesWrongTypes) {
  LogLine l;
  const std::pair<const char*, const char*> cases[] = {
      {"\"status\":429", "\"status\":\"429\""},
      {"\"status\":429", "\"status\":429.5"},
      {"\"status\":429", "\"status\":4e2"},
      {"\"status\":429", "\"status\":null"},
      {"\"key_id\":\"k-free\"", "\"key_id\":5"},
      {"\"route\":\"export\"", "\"route\":null"},
      {"\"decision\":\"rejected\"", "\"decision\":true"},
      {"\"latency_ms\":0.042", "\"latency_ms\":\"0.042\""},
      {"\"latency_ms\":0.042", "\"latency_ms\":-1"},
      {"\"latency_ms\":0.042", "\"latency_ms\":9223372036854775807"},  // * 1000 would wrap
      {"\"latency_ms\":0.042", "\"latency_ms\":1000000000001"},
      {"\"latency_ms\":0.042", "\"latency_ms\":1e300"},
      {"\"ts\":\"2026-11-29T21:59:56.123Z\"", "\"ts\":\"2026-11-29 21:59:56\""},
      {"\"ts\":\"2026-11-29T21:59:56.123Z\"", "\"ts\":\"2026-02-30T21:59:56.123Z\""},
      {"\"ts\":\"2026-11-29T21:59:56.123Z\"", "\"ts\":1790000000"},
      {"\"cost\":3", "\"cost\":{\"n\":3}"},
      {"\"cost\":3", "\"cost\":[3]"},
      {"\"cost\":3", "\"cost\":01"},
      {"\"cost\":3", "\"cost\":tru"},
      {"\"cost\":3", "\"cost\":3,\"cost\":3,\"route\":\"x\""},
  };
  for (const auto& [from, to] : cases) {
    std::string line = kGood;
    line.replace(line.find(from), std::string_view(from).size(), to);
    EXPECT_NE(Parse(line, l), nullptr) << line;
  }
}

TEST(LogLine, RefusesWhatIsNoObject) {
  LogLine l;
  for (const std::string& bad :
       std::vector<std::string>{"", "   ", "[]", "\"x\"", "5", "null", "{", "{\"ts\"}",
                                "{\"ts\":\"a\",}", kGood + "x", kGood + "{}", "x" + kGood}) {
    EXPECT_NE(Parse(bad, l), nullptr) << bad;
  }
  EXPECT_STREQ(Parse("", l), "empty line");
  EXPECT_STREQ(Parse("[1]", l), "not a JSON object");
  // Whitespace around and inside is JSON; a CRLF ending too.
  std::string spaced = " " + kGood + " \r";
  EXPECT_EQ(Parse(spaced, l), nullptr);
}

TEST(LogLine, RefusesNulAndControlBytes) {
  LogLine l;
  std::string in_string = kGood;
  in_string.insert(in_string.find("k-free") + 1, 1, '\0');
  EXPECT_STREQ(Parse(in_string, l), "control byte in a string");
  std::string outside = kGood;
  outside.insert(outside.find(",\"method\""), 1, '\0');
  EXPECT_NE(Parse(outside, l), nullptr);
  std::string tab = kGood;
  tab.insert(tab.find("k-free") + 1, 1, '\t');
  EXPECT_NE(Parse(tab, l), nullptr);
}

TEST(LogLine, InvalidUtf8PassesThroughAsBytes) {
  LogLine l;
  std::string line = kGood;
  line.replace(line.find("k-free"), 6, "k\xff\xc3(");
  ASSERT_EQ(Parse(line, l), nullptr);
  EXPECT_EQ(l.key_id, "k\xff\xc3(");
}

TEST(LogLine, RefusesAHugeLine) {
  LogLine l;
  std::string line = kGood;
  line.insert(1, "\"pad\":\"" + std::string(kMaxLineBytes, 'a') + "\",");
  EXPECT_STREQ(Parse(line, l), "line too long");
  std::string fits = kGood;
  fits.insert(1, "\"pad\":\"" + std::string(kMaxLineBytes - kGood.size() - 10, 'a') + "\",");
  EXPECT_EQ(Parse(fits, l), nullptr);
}

TEST(LogLine, LatencyInMicroseconds) {
  LogLine l;
  for (const auto& [text, us] : std::vector<std::pair<std::string, int64_t>>{{"0.042", 42},
                                                                             {"12", 12'000},
                                                                             {"12.3", 12'300},
                                                                             {"1.2345", 1'234},
                                                                             {"2e3", 2'000'000}}) {
    std::string line = kGood;
    line.replace(line.find("0.042"), 5, text);
    ASSERT_EQ(Parse(line, l), nullptr) << text;
    EXPECT_EQ(l.latency_us, us) << text;
  }
}

TEST(IsoUtc, ParsesTheLogsTimes) {
  int64_t us = -1;
  ASSERT_TRUE(ParseIsoUtc("1970-01-01T00:00:00Z", us));
  EXPECT_EQ(us, 0);
  ASSERT_TRUE(ParseIsoUtc("2000-03-01T00:00:00.5Z", us));
  EXPECT_EQ(us, 951'868'800'500'000);
  ASSERT_TRUE(ParseIsoUtc("2024-02-29T23:59:59.999999Z", us));
  EXPECT_EQ(us, 1'709'251'199'999'999);
  for (const char* bad : {"2023-02-29T00:00:00Z", "2024-13-01T00:00:00Z", "2024-01-01T24:00:00Z",
                          "2024-01-01T00:00:00.Z", "2024-01-01T00:00:00.1234567Z",
                          "2024-01-01T00:00:00", "2024-01-01T00:00:0aZ", ""}) {
    EXPECT_FALSE(ParseIsoUtc(bad, us)) << bad;
  }
}

}  // namespace
}  // namespace tollgate::replay
