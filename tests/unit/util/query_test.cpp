#include <gtest/gtest.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <tollgate/util/query.hpp>
#include <tuple>
#include <vector>

namespace tollgate::util {
namespace {

using Params = std::vector<std::tuple<std::string, std::string, bool>>;

Params All(std::string_view query) {
  Params out;
  ForEachQueryParam(query, [&](std::string_view name, std::string_view value, bool has_value) {
    out.emplace_back(name, value, has_value);
  });
  return out;
}

TEST(QueryTest, SplitsAtAmpersandsAndDecodesNamesAndValues) {
  EXPECT_EQ(All("a=1&b=x+y&c=%41%2b%2F"),
            (Params{{"a", "1", true}, {"b", "x y", true}, {"c", "A+/", true}}));
  EXPECT_EQ(All("pag%65s=5000"), (Params{{"pages", "5000", true}}));
  EXPECT_EQ(All("a%3Db=c%26d"), (Params{{"a=b", "c&d", true}}));  // encoded separators are data
  EXPECT_EQ(All("a=b=c"), (Params{{"a", "b=c", true}}));
  EXPECT_EQ(All("caf%C3%A9=%e2%82%ac"), (Params{{"caf\xC3\xA9", "\xE2\x82\xAC", true}}));
}

TEST(QueryTest, ParametersWithoutValuesAndEmptyOnes) {
  EXPECT_EQ(All("verbose&a="), (Params{{"verbose", "", false}, {"a", "", true}}));
  EXPECT_EQ(All("=x"), (Params{{"", "x", true}}));
  EXPECT_EQ(All("&&a=1&&&b=2&"), (Params{{"a", "1", true}, {"b", "2", true}}));
  EXPECT_EQ(All(""), Params{});
  EXPECT_EQ(All("&"), Params{});
}

TEST(QueryTest, RepeatedNamesAreEachReported) {
  EXPECT_EQ(All("pages=1&pages=5000&pag%65s=7"),
            (Params{{"pages", "1", true}, {"pages", "5000", true}, {"pages", "7", true}}));
}

TEST(QueryTest, MalformedEscapesAreKeptAsTheyAre) {
  EXPECT_EQ(All("a=%&b=%4&c=%zz&d=%%41&e=100%"), (Params{{"a", "%", true},
                                                         {"b", "%4", true},
                                                         {"c", "%zz", true},
                                                         {"d", "%A", true},
                                                         {"e", "100%", true}}));
}

TEST(QueryTest, AFalseReturnStopsTheWalk) {
  int calls = 0;
  ForEachQueryParam("a=1&b=2&c=3", [&](std::string_view name, std::string_view, bool) {
    ++calls;
    return name != "b";
  });
  EXPECT_EQ(calls, 2);
}

TEST(QueryTest, FormDecodeReturnsTheInputWhenNothingChanges) {
  std::string scratch;
  const std::string_view plain = "abc-._~!$'()*,;:@/?";
  EXPECT_EQ(FormDecode(plain, scratch).data(), plain.data());
  EXPECT_TRUE(scratch.empty());
  EXPECT_EQ(FormDecode("a+b%21", scratch), "a b!");
  EXPECT_EQ(FormDecode("%00", scratch), std::string_view("\0", 1));
}

TEST(QueryTest, QueryValueIsTheFirstMatchByDecodedName) {
  EXPECT_EQ(QueryValue("period=2024-05&format=csv", "format"), "csv");
  EXPECT_EQ(QueryValue("p%65riod=2024%2D05&period=x", "period"), "2024-05");
  EXPECT_EQ(QueryValue("account=acme+corp", "account"), "acme corp");
  EXPECT_EQ(QueryValue("verbose&x=1", "verbose"), "");
  EXPECT_EQ(QueryValue("a=1", "b"), std::nullopt);
  EXPECT_EQ(QueryValue("", "a"), std::nullopt);
  EXPECT_EQ(QueryValue("ab=1", "a"), std::nullopt);
}

// Route cost reads a count through this parser: each spelling an upstream framework reads as
// `pages` counts, and a repeated parameter counts its largest value (frameworks read the first,
// the last or all of them: the largest covers each).
TEST(QueryTest, ACostParameterInEverySpellingAndRepetition) {
  auto largest = [](std::string_view query) {
    int64_t max = -1;
    ForEachQueryParam(query, [&](std::string_view name, std::string_view value, bool) {
      if (name != "pages") return;
      int64_t n = 0;
      const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec == std::errc() && p == value.data() + value.size()) max = std::max(max, n);
    });
    return max;
  };
  EXPECT_EQ(largest("pages=5000"), 5000);
  EXPECT_EQ(largest("pag%65s=5000"), 5000);
  EXPECT_EQ(largest("%70%61%67%65%73=5000"), 5000);
  EXPECT_EQ(largest("pages=1&pages=5000"), 5000);
  EXPECT_EQ(largest("pages=5000&pages=1"), 5000);
  EXPECT_EQ(largest("x=1&pages=%35%30%30%30"), 5000);
  EXPECT_EQ(largest("Pages=5000"), -1);  // names are case-sensitive, as upstreams read them
  EXPECT_EQ(largest(""), -1);
}

}  // namespace
}  // namespace tollgate::util
