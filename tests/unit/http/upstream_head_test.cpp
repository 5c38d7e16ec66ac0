// HeadEnd and ParseSimpleHead (src/http/upstream_head.cpp): the in-place reader of an upstream
// response head of the common shape. Everything else is left to Beast's parser (false).
#include "http/upstream_head.hpp"

#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace tollgate::http {
namespace {

bool Parse(std::string_view head, SimpleHead& h, bool is_head = false) {
  return ParseSimpleHead(head, is_head, h);
}

bool Simple(std::string_view head, bool is_head = false) {
  SimpleHead h;
  return Parse(head, h, is_head);
}

TEST(UpstreamHeadTest, HeadEndIsJustAfterTheBlankLine) {
  const std::string_view head = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n";
  EXPECT_EQ(HeadEnd(std::string(head) + "hi"), head.size());
  EXPECT_EQ(HeadEnd(head.substr(0, head.size() - 1)), std::string_view::npos);
  EXPECT_EQ(HeadEnd("HTTP/1.1 200 OK\n\n"), std::string_view::npos);  // bare LF: not ours
  EXPECT_EQ(HeadEnd(""), std::string_view::npos);
}

TEST(UpstreamHeadTest, ReadsTheCommonShape) {
  const std::string_view head =
      "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nKeep-Alive: timeout=5\r\n"
      "Content-Length: 17\r\nX-Trace:  a b \r\n\r\n";
  SimpleHead h;
  ASSERT_TRUE(Parse(head, h));
  EXPECT_EQ(h.status, 201u);
  EXPECT_EQ(h.reason, "Created");
  EXPECT_EQ(h.size, head.size());
  EXPECT_EQ(h.content_length, 17u);
  EXPECT_TRUE(h.keep_alive);
  ASSERT_EQ(h.line_count, 2u);  // Keep-Alive and Content-Length are not relayed as they are
  EXPECT_EQ(h.lines[0].text, "Content-Type: application/json");
  EXPECT_EQ(h.lines[0].name_size, 12u);
  EXPECT_EQ(h.lines[1].text, "X-Trace:  a b ");
}

TEST(UpstreamHeadTest, KeepAliveFollowsVersionAndConnection) {
  SimpleHead h;
  ASSERT_TRUE(Parse("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", h));
  EXPECT_FALSE(h.keep_alive);
  ASSERT_TRUE(Parse("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n", h));
  EXPECT_TRUE(h.keep_alive);
  ASSERT_TRUE(Parse("HTTP/1.1 200 OK\r\nconnection: close\r\nContent-Length: 0\r\n\r\n", h));
  EXPECT_FALSE(h.keep_alive);
  EXPECT_FALSE(Simple("HTTP/1.1 200 OK\r\nConnection: Upgrade\r\nContent-Length: 0\r\n\r\n"));
}

TEST(UpstreamHeadTest, BodylessAnswersNeedNoLength) {
  SimpleHead h;
  ASSERT_TRUE(Parse("HTTP/1.1 204 No Content\r\n\r\n", h));
  EXPECT_FALSE(h.content_length);
  ASSERT_TRUE(Parse("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", h));
  EXPECT_FALSE(h.content_length);  // a 304 has no body, whatever it says
  ASSERT_TRUE(Parse("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", h, /*is_head=*/true));
  EXPECT_EQ(h.content_length, 10u);  // the length of the body a GET would get
  ASSERT_TRUE(Parse("HTTP/1.1 200 OK\r\n\r\n", h, /*is_head=*/true));
  EXPECT_FALSE(Simple("HTTP/1.1 200 OK\r\n\r\n"));  // read to close: Beast's parser
}

// Every other shape goes to Beast's parser, which accepts or refuses it.
TEST(UpstreamHeadTest, LeavesOtherShapesToBeast) {
  for (const char* head : {
           "HTTP/1.1 100 Continue\r\n\r\n",
           "HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
           "HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n",
           "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
           "HTTP/1.1  200 OK\r\nContent-Length: 0\r\n\r\n",
           "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n",
           "HTTP/1.1 200 OK\r\nX-A: 1\r\n b\r\nContent-Length: 0\r\n\r\n",
           "HTTP/1.1 200 OK\r\nX-A : 1\r\nContent-Length: 0\r\n\r\n",
           "HTTP/1.1 200 OK\r\n: 1\r\nContent-Length: 0\r\n\r\n",
           "HTTP/1.1 200 OK\r\nX-A: 1\nContent-Length: 0\r\n\r\n",
       }) {
    EXPECT_FALSE(Simple(head)) << head;
  }
}

// Regression: heads Beast's parser refuses were read here and relayed as they came: a status
// line without the SP after the code and a field name with '=' (both found by
// tests/fuzz/upstream_head_fuzz.cpp), other names that are not tokens, control bytes in a value
// or the reason phrase (a lone CR relayed to a client can end a line there;
// tests/integration/e2e/test_upstream_head.py shows it through the binary).
TEST(UpstreamHeadTest, NeverTakesWhatBeastRefuses) {
  using namespace std::string_view_literals;
  for (const std::string_view head : {
           "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n"sv,
           "HTTP/1.1 200 OK\r\nContent-Len=gth: 10\r\n\r\n"sv,
           "HTTP/1.1 200 OK\r\nX Bad: 1\r\nContent-Length: 0\r\n\r\n"sv,
           "HTTP/1.1 200 OK\r\nX-\x80: 1\r\nContent-Length: 0\r\n\r\n"sv,
           "HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 0\r\n\r\n"sv,
           "HTTP/1.1 200 OK\r\nX-A: a\x7f\r\nContent-Length: 0\r\n\r\n"sv,
           "HTTP/1.1 200 OK\r\nX-A: a\0b\r\nContent-Length: 0\r\n\r\n"sv,
           "HTTP/1.1 200 O\x01K\r\nContent-Length: 0\r\n\r\n"sv,
           "HTTP/1.1 200 O\rK\r\nContent-Length: 0\r\n\r\n"sv,
       }) {
    EXPECT_FALSE(Simple(head)) << head;
  }
  // What is allowed stays: an empty reason after its SP, HTAB and obs-text in a value.
  EXPECT_TRUE(Simple("HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n"));
  EXPECT_TRUE(Simple("HTTP/1.1 200 OK\r\nX-A: a\tb \xe9\r\nContent-Length: 0\r\n\r\n"));
}

// Regression: with two Connection lines the last one won here and the first one in Beast's
// parser, so "close" then "keep-alive" kept a connection the upstream meant to close.
TEST(UpstreamHeadTest, RepeatedConnectionLinesGoToBeast) {
  EXPECT_FALSE(
      Simple("HTTP/1.1 200 OK\r\nConnection: close\r\nConnection: keep-alive\r\nContent-Length: "
             "0\r\n\r\n"));
  EXPECT_FALSE(
      Simple("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nConnection: close\r\nContent-Length: "
             "0\r\n\r\n"));
}

TEST(UpstreamHeadTest, ReusedHeadIsFilledAfresh) {
  SimpleHead h;
  ASSERT_TRUE(Parse("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nContent-Length: 5\r\n\r\n", h));
  ASSERT_TRUE(Parse("HTTP/1.1 204 No Content\r\nC: 3\r\n\r\n", h));
  EXPECT_EQ(h.line_count, 1u);
  EXPECT_EQ(h.lines[0].text, "C: 3");
  EXPECT_FALSE(h.content_length);
}

TEST(UpstreamHeadTest, MoreLinesThanItHoldsGoToBeast) {
  std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n";
  for (size_t i = 0; i < SimpleHead::kMaxLines; ++i) head += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_TRUE(Simple(head + "\r\n"));
  EXPECT_FALSE(Simple(head + "X-One-More: v\r\n\r\n"));
}

}  // namespace
}  // namespace tollgate::http
