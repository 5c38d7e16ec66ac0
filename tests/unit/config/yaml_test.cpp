#include "config/yaml.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

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

// Issue 31: yaml-cpp keeps the first of two equal keys and ignores the second.
TEST(YamlDuplicates, ASecondKeyIsRefusedWithItsPathAndLine) {
  auto line_of = [](const std::string& yaml) {
    try {
      RefuseDuplicateKeys(YAML::Load(yaml), "");
    } catch (const FieldError& e) {
      return std::to_string(e.line) + " " + ErrorText(e);
    }
    return std::string();
  };
  EXPECT_EQ(line_of("a: 1\nb: {c: 1}\n"), "");
  EXPECT_EQ(line_of("a: 1\nb: 2\na: 3\n"),
            "3 a: given twice (first at line 1): YAML keeps one of them, so remove the other");
  EXPECT_EQ(line_of("l:\n  - {x: 1}\n  - {x: 1, y: 2, x: 3}\n"),
            "3 l[1].x: given twice (first at line 3): YAML keeps one of them, so remove the other");
  EXPECT_EQ(line_of("a:\n  b:\n    c: 1\n\n    c: 2\n"),
            "5 a.b.c: given twice (first at line 3): YAML keeps one of them, so remove the other");
  // Quoted or not, the same key.
  EXPECT_EQ(line_of("mode: enforce\n\"mode\": shadow\n"),
            "2 mode: given twice (first at line 1): YAML keeps one of them, so remove the other");
  // An alias is the node it names: walked once, so a "billion laughs" stays linear.
  std::string bomb = "a0: &a0 {x: 1}\n";
  for (int i = 1; i < 40; ++i) {
    const std::string prev = "*a" + std::to_string(i - 1);
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + prev + ", " + prev +
            ", " + prev + ", " + prev + "]\n";
  }
  EXPECT_EQ(line_of(bomb), "");
  EXPECT_EQ(line_of(bomb + "a0: 2\n"),
            "41 a0: given twice (first at line 1): YAML keeps one of them, so remove the other");
}

TEST(YamlDuplicates, LineOfFollowsThePath) {
  const YAML::Node root = YAML::Load(
      "server:\n  listen: x\nplans:\n  free:\n    limits:\n      - {name: b}\n      - name: c\n"
      "        capacity: 0\nroutes: [{path: /a}, {path: /b,\n  method: post}]\n");
  EXPECT_EQ(LineOf(root, "server.listen"), 2);
  EXPECT_EQ(LineOf(root, "plans.free.limits[0].name"), 6);
  EXPECT_EQ(LineOf(root, "plans.free.limits[1].capacity"), 8);
  EXPECT_EQ(LineOf(root, "plans.free.limits[1].refill"), 7);  // missing: its mapping's line
  EXPECT_EQ(LineOf(root, "plans.free.limits[9]"), 6);         // the list starts at its first item
  EXPECT_EQ(LineOf(root, "routes[1].method"), 10);
  EXPECT_EQ(LineOf(root, "nothing.here"), 0);
  EXPECT_EQ(LineOf(root, ""), 0);
  EXPECT_FALSE(root["nothing"]);  // looked up without adding it
}

TEST(YamlReaders, ListenAddressesAndExpansion) {
  ::setenv("TOLLGATE_YAML_TEST_PORT", "8443", 1);
  const YAML::Node n = YAML::Load(
      "{a: '127.0.0.1:8080', b: '[::1]:0', c: ':65535', d: '127.0.0.1:${TOLLGATE_YAML_TEST_PORT}',"
      " e: 'h:65536', f: 'h:+80', g: 'h: 80', h: '${1X}', i: 'a${'}");
  EXPECT_EQ(ListenAddress(n["a"], "a"), "127.0.0.1:8080");
  EXPECT_EQ(ListenAddress(n["b"], "b"), "[::1]:0");
  EXPECT_EQ(ListenAddress(n["c"], "c"), ":65535");
  EXPECT_EQ(ListenAddress(n["d"], "d"), "127.0.0.1:8443");
  const std::string port = "the port must be a number from 1 to 65535 (0: any free one), got '";
  EXPECT_EQ(ErrorOf([&] { ListenAddress(n["e"], "e"); }), "e: " + port + "65536'");
  EXPECT_EQ(ErrorOf([&] { ListenAddress(n["f"], "f"); }), "f: " + port + "+80'");
  EXPECT_EQ(ErrorOf([&] { ListenAddress(n["g"], "g"); }), "g: " + port + " 80'");
  EXPECT_EQ(ErrorOf([&] { Expanded(n["h"], "h"); }),
            "h: '${1X}' does not name an environment variable");
  EXPECT_EQ(ErrorOf([&] { Expanded(n["i"], "i"); }), "i: '${' without its '}'");
  EXPECT_EQ(ErrorOf([&] { Str(n["d"], "d"); }),
            "d: '${' is not expanded in this field (environment variables work in addresses, "
            "URLs, file paths and keys: docs/configuration.md, \"Environment variables\")");
  ::unsetenv("TOLLGATE_YAML_TEST_PORT");
}

}  // namespace
}  // namespace tollgate::config::internal
