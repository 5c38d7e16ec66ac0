#include <tollgate/http/chunked_framing.hpp>

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

}  // namespace
}  // namespace tollgate::http
