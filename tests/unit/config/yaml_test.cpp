#include "config/yaml.hpp"

#include <gtest/gtest.h>

namespace tollgate::config::internal {
namespace {

// The error a reader throws for `yaml`, as ParseConfig shows it ("path: message").
template <class Fn>
std::string ErrorOf(Fn&& read) {
  try {
    read();
  } catch (const FieldError& e) {
    return ErrorText(e);
  }
  return "";
}

TEST(YamlPaths, JoinAndIndex) {
  EXPECT_EQ(Join("", "plans"), "plans");
  EXPECT_EQ(Join("plans", "free"), "plans.free");
  EXPECT_EQ(Index("routes", 3), "routes[3]");
  EXPECT_EQ(ErrorText({"", "the configuration is empty"}), "the configuration is empty");
  EXPECT_EQ(ErrorText({"a.b", "required"}), "a.b: required");
}

TEST(YamlPaths, FailUnderMovesTheFieldUnderThePath) {
  EXPECT_EQ(ErrorOf([] { FailUnder("keys[0]", "rate_limit_burst: must be >= 0, got -1"); }),
            "keys[0].rate_limit_burst: must be >= 0, got -1");
  EXPECT_EQ(ErrorOf([] { FailUnder("keys[0]", "no field here"); }), "keys[0]: no field here");
}

TEST(YamlReaders, IntChecksFormAndRange) {
  const YAML::Node n =
      YAML::Load("{a: 5, b: -3, c: 1.5, d: 99999999999999999999, e: [1], f: ' 5'}");
  EXPECT_EQ(Int(n["a"], "a", 0, 10), 5);
  EXPECT_EQ(ErrorOf([&] { Int(n["a"], "a", 6, 10); }), "a: must be >= 6, got 5");
  EXPECT_EQ(ErrorOf([&] { Int(n["a"], "a", 0, 4); }), "a: must be <= 4, got 5");
  EXPECT_EQ(Int(n["b"], "b", -5, 0), -3);
  EXPECT_EQ(ErrorOf([&] { Int(n["c"], "c", 0, 10); }), "c: must be an integer, got '1.5'");
  EXPECT_EQ(ErrorOf([&] { Int(n["d"], "d", 0, 10); }), "d: out of range: 99999999999999999999");
  EXPECT_EQ(ErrorOf([&] { Int(n["e"], "e", 0, 10); }), "e: must be an integer");
  EXPECT_EQ(ErrorOf([&] { Int(n["f"], "f", 0, 10); }), "f: must be an integer, got ' 5'");
}

TEST(YamlReaders, SetOnlyWhenPresent) {
  const YAML::Node n = YAML::Load("{threads: 4}");
  int threads = 0;
  size_t max = 7;
  Set(n, "threads", "server", threads, 0, 256);
  Set(n, "max_connections", "server", max, 0, 100);
  EXPECT_EQ(threads, 4);
  EXPECT_EQ(max, 7u);
  EXPECT_EQ(ErrorOf([&] { Set(n, "threads", "server", threads, 5, 256); }),
            "server.threads: must be >= 5, got 4");
}

TEST(YamlReaders, BoolIsSpeltTrueOrFalse) {
  const YAML::Node n = YAML::Load("{a: true, b: false, c: yes, d: {}}");
  EXPECT_TRUE(Bool(n["a"], "a"));
  EXPECT_FALSE(Bool(n["b"], "b"));
  EXPECT_EQ(ErrorOf([&] { Bool(n["c"], "c"); }), "c: must be true or false, got 'yes'");
  EXPECT_EQ(ErrorOf([&] { Bool(n["d"], "d"); }), "d: must be true or false");
}

TEST(YamlReaders, StringsNamesAndLists) {
  const YAML::Node n = YAML::Load("{s: abc, m: {}, name: \"a\\r\\nb\", l: [x, y], bad: [x, [1]]}");
  EXPECT_EQ(Str(n["s"], "s"), "abc");
  EXPECT_EQ(ErrorOf([&] { Str(n["m"], "m"); }), "m: must be a string");
  EXPECT_EQ(ErrorOf([&] { Name(n["name"], "name"); }),
            "name: must not contain control characters (CR, LF, NUL, ...)");
  EXPECT_EQ(StrList(n["l"], "l"), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(ErrorOf([&] { StrList(n["s"], "s"); }), "s: must be a list");
  EXPECT_EQ(ErrorOf([&] { StrList(n["bad"], "bad"); }), "bad[1]: must be a string");
}

TEST(YamlReaders, OnlyKeysRefusesUnknownFields) {
  const YAML::Node n = YAML::Load("{listen: x, lisen: y}");
  EXPECT_EQ(ErrorOf([&] { OnlyKeys(n, "server", {"listen"}); }), "server.lisen: unknown field");
  EXPECT_EQ(ErrorOf([&] { OnlyKeys(n, "server", {"listen", "lisen"}); }), "");
  EXPECT_EQ(ErrorOf([&] { OnlyKeys(YAML::Load("[1]"), "server", {}); }),
            "server: must be a mapping");
}

TEST(YamlReaders, IsTokenIsAnRfc9110Token) {
  EXPECT_TRUE(IsToken("X-API-Key"));
  EXPECT_TRUE(IsToken("GET"));
  EXPECT_TRUE(IsToken("a!#$%&'*+-.^_`|~9"));
  EXPECT_FALSE(IsToken(""));
  EXPECT_FALSE(IsToken("X Key"));
  EXPECT_FALSE(IsToken("X:Key"));
  EXPECT_FALSE(IsToken("X-Key\r\n"));
}

}  // namespace
}  // namespace tollgate::config::internal
