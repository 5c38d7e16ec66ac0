#include <tollgate/util/json_escape.hpp>

#include <cstdio>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace tollgate::util {
namespace {

struct Case {
  const char* what;
  std::string_view in;
  std::string_view out;
};

// sizeof - 1: the literals may hold NUL bytes.
#define BYTES(s) std::string_view(s, sizeof(s) - 1)

const Case kCases[] = {
    {"empty", BYTES(""), BYTES("")},
    {"plain ASCII", BYTES("GET /v1/items?a=1&b=2"), BYTES("GET /v1/items?a=1&b=2")},
    {"quote", BYTES("a\"b"), BYTES("a\\\"b")},
    {"backslash", BYTES("a\\b"), BYTES("a\\\\b")},
    {"quote and backslash", BYTES("\\\""), BYTES("\\\\\\\"")},
    {"slash is not escaped", BYTES("/a/b"), BYTES("/a/b")},
    {"NUL", BYTES("a\0b"), BYTES("a\\u0000b")},
    {"newline, tab, CR", BYTES("\n\t\r"), BYTES("\\u000a\\u0009\\u000d")},
    {"escape, unit separator", BYTES("\x1b\x1f"), BYTES("\\u001b\\u001f")},
    {"DEL", BYTES("\x7f"), BYTES("\\u007f")},
    {"space and tilde kept", BYTES(" ~"), BYTES(" ~")},
    // Well-formed UTF-8 passes through, at each length and each edge of the ranges.
    {"2 bytes", BYTES("caf\xc3\xa9"), BYTES("caf\xc3\xa9")},
    {"2 bytes, lowest", BYTES("\xc2\x80"), BYTES("\xc2\x80")},
    {"3 bytes", BYTES("\xe2\x82\xac"), BYTES("\xe2\x82\xac")},
    {"3 bytes, lowest", BYTES("\xe0\xa0\x80"), BYTES("\xe0\xa0\x80")},
    {"3 bytes, below the surrogates", BYTES("\xed\x9f\xbf"), BYTES("\xed\x9f\xbf")},
    {"3 bytes, U+FFFF", BYTES("\xef\xbf\xbf"), BYTES("\xef\xbf\xbf")},
    {"4 bytes", BYTES("\xf0\x9f\x98\x80"), BYTES("\xf0\x9f\x98\x80")},
    {"4 bytes, lowest", BYTES("\xf0\x90\x80\x80"), BYTES("\xf0\x90\x80\x80")},
    {"4 bytes, U+10FFFF", BYTES("\xf4\x8f\xbf\xbf"), BYTES("\xf4\x8f\xbf\xbf")},
    // Anything else: one U+FFFD per byte that starts no well-formed sequence.
    {"stray continuation", BYTES("a\x80z"), BYTES("a\\ufffdz")},
    {"two stray continuations", BYTES("\xbf\x80"), BYTES("\\ufffd\\ufffd")},
    {"lead then ASCII", BYTES("/\xc3\x28"), BYTES("/\\ufffd(")},
    {"0xff 0xfe", BYTES("\xff\xfe"), BYTES("\\ufffd\\ufffd")},
    {"2-byte overlong", BYTES("\xc0\xaf"), BYTES("\\ufffd\\ufffd")},
    {"2-byte overlong, 0xc1", BYTES("\xc1\xbf"), BYTES("\\ufffd\\ufffd")},
    {"3-byte overlong", BYTES("\xe0\x80\xaf"), BYTES("\\ufffd\\ufffd\\ufffd")},
    {"surrogate", BYTES("\xed\xa0\x80"), BYTES("\\ufffd\\ufffd\\ufffd")},
    {"4-byte overlong", BYTES("\xf0\x80\x80\x80"), BYTES("\\ufffd\\ufffd\\ufffd\\ufffd")},
    {"above U+10FFFF", BYTES("\xf4\x90\x80\x80"), BYTES("\\ufffd\\ufffd\\ufffd\\ufffd")},
    {"truncated 3-byte", BYTES("\xe2\x82"), BYTES("\\ufffd\\ufffd")},
    {"truncated 4-byte", BYTES("\xf0\x9f\x98"), BYTES("\\ufffd\\ufffd\\ufffd")},
    {"4-byte cut by ASCII",
     BYTES("\xf0\x9f\x98"
           "A"),
     BYTES("\\ufffd\\ufffd\\ufffdA")},
    {"invalid then valid", BYTES("\x80\xc3\xa9"), BYTES("\\ufffd\xc3\xa9")},
};

#undef BYTES

TEST(JsonEscape, EscapesByTheTable) {
  for (const Case& c : kCases) {
    EXPECT_EQ(JsonEscape(c.in), c.out) << c.what;
  }
}

TEST(JsonEscape, AppendsToWhatIsThere) {
  for (const Case& c : kCases) {
    std::string out = "{\"k\":\"";
    AppendJsonEscaped(out, c.in);
    EXPECT_EQ(out, "{\"k\":\"" + std::string(c.out)) << c.what;
  }
}

TEST(JsonEscape, EveryControlByteAsUnicodeEscape) {
  for (int b = 0; b <= 0x7f; ++b) {
    if (b >= 0x20 && b != 0x7f) continue;
    char want[8];
    std::snprintf(want, sizeof want, "\\u%04x", b);
    EXPECT_EQ(JsonEscape(std::string(1, static_cast<char>(b))), want) << b;
  }
}

}  // namespace
}  // namespace tollgate::util
