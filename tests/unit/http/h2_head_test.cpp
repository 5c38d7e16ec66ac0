#include "http/h2_head.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "http/flood_guard.hpp"

namespace tollgate::http {
namespace {

std::vector<H2Field> Get(std::string path, std::vector<H2Field> extra = {}) {
  std::vector<H2Field> f = {{":method", "GET"},
                            {":scheme", "https"},
                            {":authority", "api.example"},
                            {":path", std::move(path)}};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

std::string Render(const std::vector<H2Field>& fields, bool body = false,
                   H2Request* out_request = nullptr) {
  std::string out;
  H2Request request;
  if (RenderH1Request(fields, body, out, request) != H2HeadResult::kOk) return "malformed";
  if (out_request) *out_request = request;
  return out;
}

TEST(H2Head, RendersTheRequestItMeans) {
  EXPECT_EQ(Render(Get("/v1/items?a=1", {{"accept", "*/*"}})),
            "GET /v1/items?a=1 HTTP/1.1\r\nHost: api.example\r\naccept: */*\r\n\r\n");
}

TEST(H2Head, BodyWithoutLengthIsChunked) {
  H2Request r;
  EXPECT_EQ(Render(Get("/u"), true, &r),
            "GET /u HTTP/1.1\r\nHost: api.example\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_TRUE(r.chunked);
  EXPECT_EQ(Render(Get("/u", {{"content-length", "5"}}), true, &r),
            "GET /u HTTP/1.1\r\nHost: api.example\r\ncontent-length: 5\r\n\r\n");
  EXPECT_FALSE(r.chunked);
}

TEST(H2Head, CookiesJoinedExpectAndTeDropped) {
  EXPECT_EQ(
      Render(Get(
          "/",
          {{"cookie", "a=1"}, {"expect", "100-continue"}, {"cookie", "b=2"}, {"te", "trailers"}})),
      "GET / HTTP/1.1\r\nHost: api.example\r\ncookie: a=1; b=2\r\n\r\n");
}

TEST(H2Head, HostOnlyWhenNoAuthority) {
  EXPECT_EQ(Render({{":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {"host", "h"}}),
            "GET / HTTP/1.1\r\nhost: h\r\n\r\n");
  EXPECT_EQ(Render(Get("/", {{"host", "api.example"}})),
            "GET / HTTP/1.1\r\nHost: api.example\r\n\r\n");
}

TEST(H2Head, GrpcIsRecognised) {
  H2Request r;
  Render(Get("/pkg.Svc/Method", {{"content-type", "application/grpc+proto"}}), true, &r);
  EXPECT_TRUE(r.grpc);
  Render(Get("/x", {{"content-type", "application/json"}}), true, &r);
  EXPECT_FALSE(r.grpc);
}

TEST(H2Head, ConnectHasAuthorityOnly) {
  EXPECT_EQ(Render({{":method", "CONNECT"}, {":authority", "db:5432"}}),
            "CONNECT db:5432 HTTP/1.1\r\nHost: db:5432\r\n\r\n");
  EXPECT_EQ(Render({{":method", "CONNECT"}, {":authority", "db:5432"}, {":path", "/"}}),
            "malformed");
}

// Every way a block could smuggle what HTTP/1.1 forbids: each is malformed.
TEST(H2Head, MalformedBlocks) {
  const std::vector<std::vector<H2Field>> cases = {
      Get("/a b"),
      Get("/a\r\nX: y"),
      Get(""),
      Get("/\x7f"),
      Get("/\xff"),
      Get("/", {{"X-Upper", "1"}}),
      Get("/", {{"connection", "close"}}),
      Get("/", {{"keep-alive", "1"}}),
      Get("/", {{"proxy-connection", "1"}}),
      Get("/", {{"transfer-encoding", "chunked"}}),
      Get("/", {{"upgrade", "h2c"}}),
      Get("/", {{"http2-settings", "x"}}),
      Get("/", {{"te", "gzip"}}),
      Get("/", {{"x", "1\r\nx-tollgate-key-id: k"}}),
      Get("/", {{"x", "1\n"}}),
      Get("/", {{"x", std::string("1\0", 2)}}),
      Get("/", {{"x", " 1"}}),
      Get("/", {{"x", "1 "}}),
      Get("/", {{"x", "1\t"}}),
      Get("/", {{"x:y", "1"}}),
      Get("/", {{"x y", "1"}}),
      Get("/", {{"", "1"}}),
      Get("/", {{":path", "/b"}}),
      Get("/", {{":status", "200"}}),
      Get("/", {{":protocol", "websocket"}}),
      Get("/", {{"host", "evil"}}),
      Get("/", {{"content-length", "1"}, {"content-length", "1"}}),
      {{":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {"host", "a"}, {"host", "a"}},
      {{":method", "GET"}, {":scheme", "http"}, {":authority", "a"}},
      {{":scheme", "http"}, {":authority", "a"}, {":path", "/"}},
      {{":method", "GET /"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}},
      {{":method", "GET"}, {":scheme", "ht tp"}, {":authority", "a"}, {":path", "/"}},
      {{":method", "GET"}, {":scheme", "http"}, {":authority", "a b"}, {":path", "/"}},
      {{":method", "GET"}, {":scheme", "http"}, {":authority", ""}, {":path", "/"}},
      // :path in the origin form only (RFC 9113 8.3.1): no absolute or relative URI.
      Get("http://evil.example/v1/items"),
      Get("https://api.example/"),
      Get("v1/items"),
      Get(""),
      Get("*"),
  };
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(Render(cases[i]), "malformed") << i;
}

TEST(H2Head, AsteriskFormForOptionsOnly) {
  EXPECT_EQ(
      Render({{":method", "OPTIONS"}, {":scheme", "https"}, {":authority", "a"}, {":path", "*"}}),
      "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n");
}

TEST(H2Head, ResponseFieldsThatStayBehind) {
  for (const char* own :
       {"Connection", "keep-alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "TE"}) {
    EXPECT_FALSE(CrossesToH2(own, "")) << own;
  }
  EXPECT_FALSE(CrossesToH2("X-Hop", "close, x-hop"));
  EXPECT_TRUE(CrossesToH2("RateLimit", "close"));
  EXPECT_TRUE(CrossesToH2("Retry-After", ""));
}

TEST(H2Head, GrpcStatusOfHttpAnswers) {
  EXPECT_EQ(GrpcStatusOf(429), 8);  // RESOURCE_EXHAUSTED
  EXPECT_EQ(GrpcStatusOf(401), 16);
  EXPECT_EQ(GrpcStatusOf(403), 7);
  EXPECT_EQ(GrpcStatusOf(404), 12);
  EXPECT_EQ(GrpcStatusOf(400), 13);
  EXPECT_EQ(GrpcStatusOf(503), 14);
  EXPECT_EQ(GrpcStatusOf(502), 14);
  EXPECT_EQ(GrpcStatusOf(504), 14);
  EXPECT_EQ(GrpcStatusOf(418), 2);
}

TEST(H2Head, GrpcMessagePercentEncodes) {
  EXPECT_EQ(GrpcMessage("rate_limited: too many"), "rate_limited: too many");
  EXPECT_EQ(GrpcMessage("50% \xc3\xa9\n"), "50%25 %C3%A9%0A");
}

TEST(FloodGuard, CountsWithinAnInterval) {
  using std::chrono::seconds;
  FloodGuard g(3, seconds(10));
  const FloodGuard::TimePoint t0{seconds(100)};
  EXPECT_TRUE(g.Count(t0));
  EXPECT_TRUE(g.Count(t0 + seconds(1)));
  EXPECT_TRUE(g.Count(t0 + seconds(2)));
  EXPECT_FALSE(g.Count(t0 + seconds(3)));
  EXPECT_TRUE(g.Count(t0 + seconds(10)));  // a new window
}

}  // namespace
}  // namespace tollgate::http
