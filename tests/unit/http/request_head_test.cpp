#include <tollgate/http/request_head.hpp>

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tollgate::http {
namespace {

HeadParse Parse(std::string_view data, RequestHead& h, size_t* size, size_t max = 8192) {
  return ParseRequestHead(data, max, h, size);
}

TEST(RequestHeadTest, ParsesTheCommonShapeInPlace) {
  const std::string data =
      "GET /v1/items?page=2 HTTP/1.1\r\nHost: api\r\nX-API-Key:  k-1 \r\nAccept: */*\r\n\r\nGET "
      "/next";
  RequestHead h;
  size_t size = 0;
  ASSERT_EQ(Parse(data, h, &size), HeadParse::kComplete);
  EXPECT_EQ(size, data.find("GET /next"));
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.target, "/v1/items?page=2");
  EXPECT_EQ(h.version, 11u);
  EXPECT_TRUE(h.keep_alive);
  EXPECT_FALSE(h.chunked);
  EXPECT_FALSE(h.content_length);
  ASSERT_EQ(h.fields.size(), 3u);
  EXPECT_EQ(h.fields[1].name, "X-API-Key");
  EXPECT_EQ(h.fields[1].value, "k-1");  // optional whitespace trimmed
  EXPECT_EQ(h.Get("x-api-key"), "k-1");
  EXPECT_EQ(h.Get("Missing"), "");
  // Views into the data, not copies.
  EXPECT_GE(h.target.data(), data.data());
  EXPECT_LT(h.target.data(), data.data() + data.size());
}

// A route's max_header_bytes counts the head as it is forwarded: optional whitespace is not
// counted, since the forwarded head has none.
TEST(RequestHeadTest, ForwardedHeadSizeIsTheSizeOfTheHeadAsForwarded) {
  const std::string tidy = "GET /v1/items HTTP/1.1\r\nHost: api\r\nX-API-Key: k-1\r\n\r\n";
  const std::string padded = "GET /v1/items HTTP/1.1\r\nHost:    api   \r\nX-API-Key:\tk-1\r\n\r\n";
  for (const std::string& data : {tidy, padded}) {
    RequestHead h;
    size_t size = 0;
    ASSERT_EQ(Parse(data, h, &size), HeadParse::kComplete) << data;
    EXPECT_EQ(ForwardedHeadSize(h), tidy.size()) << data;
  }
}

TEST(RequestHeadTest, MoreFieldsThanAskedForAreLeftToTheGeneralParser) {
  std::string data = "GET / HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 4; ++i) data += "a:\r\n";  // empty fields count too
  data += "\r\n";
  RequestHead h;
  size_t size = 0;
  EXPECT_EQ(ParseRequestHead(data, 8192, h, &size, 5), HeadParse::kComplete);
  EXPECT_EQ(ParseRequestHead(data, 8192, h, &size, 4), HeadParse::kNotSimple);
}

TEST(RequestHeadTest, KeepAliveAsTheVersionAndConnectionSay) {
  struct Case {
    const char* head;
    bool keep_alive;
  } cases[] = {
      {"GET / HTTP/1.1\r\n\r\n", true},
      {"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", false},
      {"GET / HTTP/1.1\r\nConnection: Upgrade, CLOSE\r\n\r\n", false},
      {"GET / HTTP/1.0\r\n\r\n", false},
      {"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true},
      {"GET / HTTP/1.0\r\nConnection: closed\r\n\r\n", false},
  };
  for (const Case& c : cases) {
    RequestHead h;
    size_t size = 0;
    ASSERT_EQ(Parse(c.head, h, &size), HeadParse::kComplete) << c.head;
    EXPECT_EQ(h.keep_alive, c.keep_alive) << c.head;
  }
  EXPECT_TRUE(HasToken(" a ,b,\tkeep-alive ", "Keep-Alive"));
  EXPECT_FALSE(HasToken("keep-alive-ish", "keep-alive"));
  EXPECT_FALSE(HasToken("", "close"));
}

TEST(RequestHeadTest, AnExplicitZeroLengthIsNoBody) {
  for (const char* head : {"POST /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
                           "POST /x HTTP/1.1\r\ncontent-length: 000\r\n\r\n"}) {
    RequestHead h;
    size_t size = 0;
    ASSERT_EQ(Parse(head, h, &size), HeadParse::kComplete) << head;
    EXPECT_EQ(h.content_length, 0u);
  }
}

TEST(RequestHeadTest, AHeadCutShortNeedsMore) {
  const std::string full = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
  for (size_t n = 0; n < full.size(); ++n) {
    RequestHead h;
    size_t size = 0;
    EXPECT_EQ(Parse(full.substr(0, n), h, &size), HeadParse::kNeedMore) << n;
  }
}

// Everything but the common shape goes to the general parser, which accepts or refuses it.
TEST(RequestHeadTest, LeavesEverythingElseToTheGeneralParser) {
  const std::string many_fields = [] {
    std::string s = "GET / HTTP/1.1\r\n";
    for (size_t i = 0; i <= RequestHead::kMaxFields; ++i) s += "F" + std::to_string(i) + ": v\r\n";
    return s + "\r\n";
  }();
  const std::string cases[] = {
      "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",      // a body
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",  // a body
      "GET / HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
      "GET / HTTP/1.1\r\nContent-Length: \r\n\r\n",
      "GET / HTTP/1.1\r\nContent-Length: -0\r\n\r\n",
      "GET / HTTP/1.1\r\nConnection: close\r\nConnection: close\r\n\r\n",
      "GET / HTTP/1.1\r\nConnection: cl\xf6se\r\n\r\n",  // not a token list
      "GET / HTTP/1.1\r\nConnection: keep alive\r\n\r\n",
      "GET / HTTP/1.1\r\nProxy-Connection: close\r\n\r\n",
      "GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n",  // a folded line
      "GET / HTTP/1.1\nHost: a\n\n",           // bare LF
      "GET / HTTP/1.1\r\nHost: a\n\r\n",
      "GET / HTTP/1.1\r\nNo colon\r\n\r\n",
      "GET / HTTP/1.1\r\nName : v\r\n\r\n",  // space before the colon
      "GET / HTTP/1.1\r\n: v\r\n\r\n",
      "GET / HTTP/1.1\r\nA: b\x01\r\n\r\n",  // a control character
      "GET / HTTP/1.1\r\nA: b\x7f\r\n\r\n",
      "G(T / HTTP/1.1\r\n\r\n",
      " GET / HTTP/1.1\r\n\r\n",
      "GET  / HTTP/1.1\r\n\r\n",
      "GET /a b HTTP/1.1\r\n\r\n",
      "GET /\x01 HTTP/1.1\r\n\r\n",
      "GET / HTTP/2.0\r\n\r\n",
      "GET / http/1.1\r\n\r\n",
      "GET / HTTP/1.1 \r\n\r\n",
      "GET /\r\n\r\n",
      many_fields,
  };
  for (const std::string& c : cases) {
    RequestHead h;
    size_t size = 0;
    EXPECT_EQ(Parse(c, h, &size), HeadParse::kNotSimple) << c;
  }
}

TEST(RequestHeadTest, AHeadLargerThanTheLimitIsLeftToTheGeneralParser) {
  const std::string head = "GET / HTTP/1.1\r\nX-Pad: " + std::string(200, 'p') + "\r\n\r\n";
  RequestHead h;
  size_t size = 0;
  EXPECT_EQ(Parse(head, h, &size, head.size()), HeadParse::kComplete);
  EXPECT_EQ(Parse(head, h, &size, head.size() - 1), HeadParse::kNotSimple);
  // Incomplete and already at the limit: it cannot become a head within it.
  EXPECT_EQ(Parse(head.substr(0, 100), h, &size, 100), HeadParse::kNotSimple);
  EXPECT_EQ(Parse(head.substr(0, 99), h, &size, 100), HeadParse::kNeedMore);
}

// Issue 18: framing and Host, as RFC 9112 requires them before anything reads the request.
TEST(RequestHeadTest, CheckRequestHeadRefusesFramingAndHostItCannotTrust) {
  struct Row {
    unsigned version;
    std::vector<RequestHead::Field> fields;
    const char* code;  // nullptr: accepted
  };
  const std::vector<Row> rows = {
      {11, {{"Host", "api"}}, nullptr},
      {11, {{"Host", "api.example.com:8080"}}, nullptr},
      {11, {{"host", "[::1]:8080"}}, nullptr},
      {11, {{"Host", "10.0.0.1"}}, nullptr},
      {11, {{"Host", ""}}, nullptr},  // RFC 9112 3.2: empty when the target has no authority
      {10, {}, nullptr},
      {11, {}, "invalid_host"},
      {11, {{"Host", "a"}, {"Host", "a"}}, "invalid_host"},
      {10, {{"Host", "a"}, {"host", "b"}}, "invalid_host"},
      {11, {{"Host", "a b@evil"}}, "invalid_host"},
      {11, {{"Host", "evil@x"}}, "invalid_host"},
      {11, {{"Host", "a/b"}}, "invalid_host"},
      {11, {{"Host", "a:80x"}}, "invalid_host"},
      {11, {{"Host", "a:123456"}}, "invalid_host"},
      {11, {{"Host", "[::1"}}, "invalid_host"},
      {11, {{"Host", "[zz]"}}, "invalid_host"},
      {11, {{"Host", "a\\b"}}, "invalid_host"},
      {11, {{"Host", "a"}, {"Transfer-Encoding", "chunked"}}, nullptr},
      {11, {{"Host", "a"}, {"transfer-encoding", "Chunked"}}, nullptr},
      {11, {{"Host", "a"}, {"Transfer-Encoding", "xchunked"}}, "invalid_transfer_encoding"},
      {11,
       {{"Host", "a"}, {"Transfer-Encoding", "chunked, identity"}},
       "invalid_transfer_encoding"},
      {11, {{"Host", "a"}, {"Transfer-Encoding", "chunked, chunked"}}, "invalid_transfer_encoding"},
      {11,
       {{"Host", "a"}, {"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "chunked"}},
       "invalid_transfer_encoding"},
      {11, {{"Host", "a"}, {"Transfer-Encoding", "gzip, chunked"}}, "invalid_transfer_encoding"},
      {11, {{"Host", "a"}, {"Transfer-Encoding", "identity"}}, "invalid_transfer_encoding"},
      {11, {{"Host", "a"}, {"Transfer-Encoding", ""}}, "invalid_transfer_encoding"},
      {10, {{"Transfer-Encoding", "chunked"}}, "invalid_transfer_encoding"},
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    RequestHead head;
    head.version = rows[i].version;
    head.fields = rows[i].fields;
    std::string_view host;
    const char* code = CheckRequestHead(head, &host);
    EXPECT_STREQ(code, rows[i].code) << "row " << i;
  }
}

TEST(RequestHeadTest, ReadsAsFoldsCaseAndUnderscore) {
  EXPECT_TRUE(ReadsAs("X_Tollgate_Key_Id", "X-Tollgate-Key-Id"));
  EXPECT_TRUE(ReadsAs("x-tollgate-plan", "x-tollgate-", true));
  EXPECT_TRUE(ReadsAs("X_TOLLGATE_ANYTHING", "x-tollgate-", true));
  EXPECT_TRUE(ReadsAs("X_Forwarded_For", "x-forwarded-for"));
  EXPECT_TRUE(ReadsAs("x_api_key", "X-API-Key"));
  EXPECT_FALSE(ReadsAs("X-Tollgate", "x-tollgate-", true));
  EXPECT_FALSE(ReadsAs("X-Forwarded-Fo", "x-forwarded-for"));
  EXPECT_FALSE(ReadsAs("X-Forwarded-Fors", "x-forwarded-for"));
  EXPECT_FALSE(ReadsAs("Y-Tollgate-Plan", "x-tollgate-", true));
}

}  // namespace
}  // namespace tollgate::http
