#include <tollgate/http/chunked_framing.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tollgate::http {
namespace {

using Result = ChunkedFraming::Result;

// The whole body at once, then one byte at a time: the same answer.
Result ScanWhole(std::string_view body, size_t* used = nullptr) {
  ChunkedFraming f;
  return f.Scan(body, used);
}
Result ScanBytes(std::string_view body) {
  ChunkedFraming f;
  Result r = Result::kMore;
  for (char c : body) {
    r = f.Scan(std::string_view(&c, 1));
    if (r != Result::kMore) break;
  }
  return r;
}

TEST(ChunkedFraming, WellFormedBodiesEnd) {
  const std::vector<std::string> bodies = {
      "5\r\nhello\r\n0\r\n\r\n",
      "0\r\n\r\n",
      "000\r\n\r\n",
      "0005\r\nhello\r\n0\r\n\r\n",
      "A\r\n0123456789\r\n0\r\n\r\n",
      "a\r\n0123456789\r\n0\r\n\r\n",
      "5;name=value\r\nhello\r\n0\r\n\r\n",
      "5;n=\"a b\\\"c\"\r\nhello\r\n0;last\r\n\r\n",
      "5; a ; b = c\r\nhello\r\n0\r\n\r\n",
      "5;d=\"e\"\r\nhello\r\n0\r\n\r\n",
      "5\r\nhello\r\n0\r\nX-Sum: 1\r\nX-Other:\r\n\r\n",
      "2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n",
      "ffffffffffffffff\r\n",  // a size of 16 digits is not refused (the limit is the body's)
  };
  for (const std::string& b : bodies) {
    const Result want = b.starts_with("ffff") ? Result::kMore : Result::kDone;
    EXPECT_EQ(ScanWhole(b), want) << b;
    EXPECT_EQ(ScanBytes(b), want) << b;
  }
}

TEST(ChunkedFraming, MalformedBodiesAreRefusedAtOnce) {
  const std::vector<std::string> bodies = {
      "5\nhello\r\n0\r\n\r\n",
      "5\n",
      "0\n\r\n",
      "5\r\nhello\n0\r\n\r\n",
      "5\rhello\r\n0\r\n\r\n",
      "5\r\nhello\r0\r\n\r\n",
      "3\r\nhello\r\n0\r\n\r\n",
      "5\r\nhello0\r\n\r\n",
      "5;\x01\r\nhello\r\n",
      "5;a=\"x\r\nhello\r\n",
      "5;a@b\r\n",
      " 5\r\n",
      "\t5\r\n",
      "5 \r\n",
      "5\t\r\n",
      "\r\nhello\r\n",
      "g\r\n",
      "0x5\r\n",
      "-5\r\n",
      "+5\r\n",
      "5_0\r\n",
      "10000000000000005\r\n",
      std::string(40, 'f') + "\r\n",
      "5\r\nhello\r\n0\r\nbad trailer\r\n\r\n",
      "0\r\n: x\r\n\r\n",
      "0\r\nX-T : 1\r\n\r\n",
      "0\r\nX-T: 1\n\r\n",
      std::string("0\r\nX-T: a\0b\r\n\r\n", 15),
      "0\r\n folded\r\n\r\n",
      "5;d=e \r\n",
      "5;d \r\n",
      "5;d=\"e\"x\r\n",
      "5;a\"=b\"\r\n",
      "0\r\n\r\r",
  };
  for (const std::string& b : bodies) {
    EXPECT_EQ(ScanWhole(b), Result::kBad) << b;
    EXPECT_EQ(ScanBytes(b), Result::kBad) << b;
  }
}

TEST(ChunkedFraming, SaysWhereTheBodyEnds) {
  const std::string body = "3\r\nabc\r\n0\r\n\r\n";
  size_t used = 0;
  ASSERT_EQ(ScanWhole(body + "GET / HTTP/1.1\r\n", &used), Result::kDone);
  EXPECT_EQ(used, body.size());
  // And says so again, whatever follows.
  ChunkedFraming f;
  ASSERT_EQ(f.Scan(body), Result::kDone);
  EXPECT_EQ(f.Scan("\x01"), Result::kDone);
}

TEST(ChunkedFraming, DataMayHoldAnyBytes) {
  std::string body = "4\r\n";
  body += std::string("\r\n\0\n", 4);
  body += "\r\n0\r\n\r\n";
  EXPECT_EQ(ScanWhole(body), Result::kDone);
  EXPECT_EQ(ScanBytes(body), Result::kDone);
}

// Issue 31: an endless size line or trailer section grew the gateway's memory without bound.
// Each is refused at the first byte past its limit, whole or byte by byte, and what fits passes.
TEST(ChunkedFraming, SizeLinesAreCappedAtTheirLimit) {
  const ChunkedLimits limits;  // 4096 bytes: the size, its extensions and the CRLF
  const std::string ext = "5;a=";
  // A line of exactly the limit passes; one byte more (of a value, of blanks, of names) does not.
  const std::string fits = ext + std::string(limits.line_bytes - ext.size() - 2, 'b') + "\r\n";
  ASSERT_EQ(fits.size(), limits.line_bytes);
  const std::vector<std::string> endless = {
      ext + std::string(limits.line_bytes, 'b'),       // a token value
      "5;a=\"" + std::string(limits.line_bytes, 'q'),  // a quoted one
      "5;" + std::string(limits.line_bytes, ' '),      // blanks after ';'
      "5;a" + std::string(limits.line_bytes, ' '),     // blanks after a name
      "5;a=b" + std::string(limits.line_bytes, ' '),   // blanks after a value
  };
  for (const bool bytes : {false, true}) {
    ChunkedFraming f;
    const std::string body = fits + "hello\r\n" + fits + "hello\r\n0\r\n\r\n";
    EXPECT_EQ(bytes ? ScanBytes(body) : f.Scan(body), Result::kDone);
  }
  for (size_t i = 0; i < endless.size(); ++i) {
    for (const std::string& prefix : {std::string(), std::string("3\r\nabc\r\n")}) {
      const std::string body = prefix + endless[i];
      ChunkedFraming f;
      size_t used = 0;
      EXPECT_EQ(f.Scan(body, &used), Result::kBad) << i;
      EXPECT_EQ(used, prefix.size() + limits.line_bytes) << i;  // at the first byte over
      EXPECT_EQ(ScanBytes(body), Result::kBad) << i;
    }
  }
  // Many extensions, each short, add up on one line.
  std::string many = "5";
  while (many.size() <= limits.line_bytes) many += ";a=b";
  EXPECT_EQ(ScanWhole(many), Result::kBad);
  // Leading zeros past 16 digits were refused already.
  EXPECT_EQ(ScanWhole(std::string(limits.line_bytes, '0')), Result::kBad);
}

TEST(ChunkedFraming, LimitsAreConfigurable) {
  ChunkedFraming f(ChunkedLimits{.line_bytes = 8});
  EXPECT_EQ(f.Scan("5;a=bc\r\n"), Result::kMore);  // 8 bytes
  ChunkedFraming g(ChunkedLimits{.line_bytes = 8});
  EXPECT_EQ(g.Scan("5;a=bcd\r\n"), Result::kBad);
}

TEST(ChunkedFraming, TrailerSectionsAreCappedInBytesAndFields) {
  const ChunkedLimits limits{.trailer_bytes = 1024, .trailer_fields = 10};
  auto scan = [&](const std::string& body, bool bytes) {
    ChunkedFraming f(limits);
    if (!bytes) return f.Scan(body);
    Result r = Result::kMore;
    for (char c : body) {
      r = f.Scan(std::string_view(&c, 1));
      if (r != Result::kMore) break;
    }
    return r;
  };
  std::string ten;  // 10 fields: allowed
  for (int i = 0; i < 10; ++i) ten += "X-a: b\r\n";
  const std::string long_value = "X-a: " + std::string(limits.trailer_bytes, 'v');
  std::string endless_fields;
  for (int i = 0; i < 200; ++i) endless_fields += "X-a: b\r\n";
  for (const bool bytes : {false, true}) {
    EXPECT_EQ(scan("0\r\n" + ten + "\r\n", bytes), Result::kDone);
    EXPECT_EQ(scan("0\r\n" + ten + "X-b: c\r\n\r\n", bytes), Result::kTooLarge);
    EXPECT_EQ(scan("0\r\n" + endless_fields, bytes), Result::kTooLarge);
    EXPECT_EQ(scan("3\r\nabc\r\n0\r\n" + endless_fields, bytes), Result::kTooLarge);
    EXPECT_EQ(scan("0\r\n" + long_value, bytes), Result::kTooLarge);  // one endless field
    EXPECT_EQ(scan("0\r\nX-a:" + std::string(2000, ' '), bytes), Result::kTooLarge);
  }
  // The section's bytes, through its final CRLF: exactly the limit passes.
  const std::string head = "X-a: ";
  const std::string exact =
      head + std::string(limits.trailer_bytes - head.size() - 4, 'v') + "\r\n\r\n";
  ASSERT_EQ(exact.size(), limits.trailer_bytes);
  EXPECT_EQ(scan("0\r\n" + exact, false), Result::kDone);
  EXPECT_EQ(scan("0\r\nX" + exact, false), Result::kTooLarge);
  // And says so again.
  ChunkedFraming f(limits);
  ASSERT_EQ(f.Scan("0\r\n" + endless_fields), Result::kTooLarge);
  EXPECT_EQ(f.Scan("\r\n"), Result::kTooLarge);
}

TEST(ChunkedFraming, DataIsNotALine) {
  // A chunk's data, however large, does not count toward its size line.
  const std::string data(3 * ChunkedLimits{}.line_bytes, 'd');
  char size[32];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  const std::string body = std::string(size, static_cast<size_t>(n)) + data + "\r\n0\r\n\r\n";
  EXPECT_EQ(ScanWhole(body), Result::kDone);
  EXPECT_EQ(ScanBytes(body), Result::kDone);
}

}  // namespace
}  // namespace tollgate::http
