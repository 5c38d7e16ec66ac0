#include <tollgate/util/ascii.hpp>

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tollgate::util {
namespace {

TEST(Ascii, EqualsIgnoreCaseFoldsAsciiLettersOnly) {
  EXPECT_TRUE(EqualsIgnoreCase("Content-Length", "content-length"));
  EXPECT_TRUE(EqualsIgnoreCase("X-API-KEY", "x-api-key"));
  EXPECT_TRUE(EqualsIgnoreCase("", ""));
  EXPECT_FALSE(EqualsIgnoreCase("Content-Length", "Content-Lengt"));
  EXPECT_FALSE(EqualsIgnoreCase("Content-Length", "Content_Length"));
  // Bytes that are equal once 0x20 is set but are not two cases of a letter.
  EXPECT_FALSE(EqualsIgnoreCase("a-b", "a\rb"));
  EXPECT_FALSE(EqualsIgnoreCase("@", "`"));
  EXPECT_FALSE(EqualsIgnoreCase("[", "{"));
  EXPECT_FALSE(EqualsIgnoreCase("0", std::string_view("\x10", 1)));
  EXPECT_FALSE(EqualsIgnoreCase("\xc0", "\xe0"));
  // Every pair of bytes: equal exactly when they are equal or two cases of one letter.
  for (int x = 0; x < 256; ++x) {
    for (int y = 0; y < 256; ++y) {
      const char a = static_cast<char>(x), b = static_cast<char>(y);
      const bool letters = std::isalpha(x) && std::isalpha(y) && x < 128 && y < 128;
      const bool expected = x == y || (letters && std::tolower(x) == std::tolower(y));
      ASSERT_EQ(EqualsIgnoreCase({&a, 1}, {&b, 1}), expected) << x << " " << y;
    }
  }
}

TEST(Ascii, TrimAndListElements) {
  EXPECT_EQ(Trim(" \ta b\t "), "a b");
  std::vector<std::string> seen;
  AnyListElement(" close , ,Upgrade", [&](std::string_view e) {
    seen.emplace_back(e);
    return false;
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"close", "", "Upgrade"}));
  EXPECT_TRUE(AnyListElement("a, b", [](std::string_view e) { return e == "b"; }));
}

TEST(Ascii, ProtocolTokens) {
  EXPECT_TRUE(IsProtocolToken("websocket"));
  EXPECT_TRUE(IsProtocolToken("foo/1.1"));
  EXPECT_FALSE(IsProtocolToken(""));
  EXPECT_FALSE(IsProtocolToken("foo/"));
  EXPECT_FALSE(IsProtocolToken("/1"));
  EXPECT_FALSE(IsProtocolToken("a b"));
  EXPECT_FALSE(IsProtocolToken("a/b/c"));
}

}  // namespace
}  // namespace tollgate::util
