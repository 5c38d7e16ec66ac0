#include <tollgate/util/json_escape.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
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
    // Regression: 0xf5-0xff were read as 3-byte leads and passed through with what followed.
    {"0xf8 with continuations", BYTES("\xf8\x80\x80"), BYTES("\\ufffd\\ufffd\\ufffd")},
    {"0xf5 with continuations", BYTES("\xf5\x80\x80\x80"), BYTES("\\ufffd\\ufffd\\ufffd\\ufffd")},
    {"0xff with continuations", BYTES("\xff\xbf\xbf"), BYTES("\\ufffd\\ufffd\\ufffd")},
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

// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most
// U+10FFFF), decoded by code point rather than by the escaper's lead-byte table.
bool IsUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80           ? 1
                       : (c >> 5) == 0x6  ? 2
                       : (c >> 4) == 0xe  ? 3
                       : (c >> 3) == 0x1e ? 4
                                          : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xc0) != 0x80) return false;
      cp = cp << 6 | (b & 0x3f);
    }
    constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

// Any bytes at all give a JSON string's inside: valid UTF-8, no raw control byte, every '"' and
// '\' escaped. Seeded, so a failure repeats.
TEST(JsonEscape, AnyBytesGiveValidUtf8WithNothingRaw) {
  std::mt19937 rng(20261202);
  for (int round = 0; round < 20'000; ++round) {
    std::string in(rng() % 12, '\0');
    for (char& c : in) {
      // Mostly bytes of multi-byte sequences, so that near-valid sequences are common.
      const uint32_t r = rng();
      c = static_cast<char>(r % 4 == 0 ? r >> 8 & 0x7f : 0x80 | (r >> 8 & 0x7f));
    }
    const std::string out = JsonEscape(in);
    ASSERT_TRUE(IsUtf8(out)) << testing::PrintToString(in);
    for (size_t i = 0; i < out.size(); ++i) {
      const auto c = static_cast<unsigned char>(out[i]);
      ASSERT_FALSE(c < 0x20 || c == 0x7f) << testing::PrintToString(in);
      if (c == '\\') {
        ASSERT_LT(i + 1, out.size());
        ++i;  // the escaped byte: '"', '\\' or 'u'
        ASSERT_TRUE(out[i] == '"' || out[i] == '\\' || out[i] == 'u') << testing::PrintToString(in);
      } else {
        ASSERT_NE(c, '"') << testing::PrintToString(in);
      }
    }
    // Valid input is passed through unchanged when it needs no escape.
    if (IsUtf8(in) && in.find_first_of(std::string_view("\"\\\x7f", 3)) == std::string::npos &&
        std::none_of(in.begin(), in.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20; })) {
      ASSERT_EQ(out, in);
    }
  }
}

}  // namespace
}  // namespace tollgate::util
