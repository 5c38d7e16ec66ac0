// ParseRequestHead against Beast's parser, which the gateway uses for every head it leaves
// alone: on generated heads, anything it accepts Beast must accept the same way.
#include <tollgate/http/request_head.hpp>

#include <algorithm>
#include <cctype>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <boost/beast/http.hpp>

namespace tollgate::http {
namespace {

namespace bhttp = boost::beast::http;

std::string RandomHead(std::mt19937& rng) {
  auto pick = [&](std::initializer_list<const char*> xs) {
    return std::string(
        *(xs.begin() + std::uniform_int_distribution<size_t>(0, xs.size() - 1)(rng)));
  };
  std::string s = pick({"GET", "POST", "HEAD", "DELETE", "PATCH", "get", "M-SEARCH", "G T", ""}) +
                  " " + pick({"/", "/v1/items?page=2", "*", "http://a/b", "/a%20b", "/\x7f"}) +
                  " " + pick({"HTTP/1.1", "HTTP/1.0", "HTTP/1.1", "HTTP/2.0"}) + "\r\n";
  const int fields = std::uniform_int_distribution<int>(0, 8)(rng);
  for (int i = 0; i < fields; ++i) {
    s += pick({"Host", "X-API-Key", "Connection", "Content-Length", "Accept", "X-Forwarded-For",
               "Transfer-Encoding", "Bad Name", "X-Empty"}) +
         pick({": ", ":", ":  ", " : "}) +
         pick({"v", "close", "keep-alive", "0", "00", "5", "Upgrade, close", "", "a\tb", "x ",
               "chunked"}) +
         pick({"\r\n", "\r\n", "\r\n", "\n"});
  }
  s += pick({"\r\n", "\r\n", "\n"});
  // Now and then a byte changed anywhere.
  if (!s.empty() && std::uniform_int_distribution<int>(0, 3)(rng) == 0) {
    s[std::uniform_int_distribution<size_t>(0, s.size() - 1)(rng)] =
        static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
  }
  return s;
}

TEST(RequestHeadBeastTest, WhatItAcceptsBeastAcceptsTheSameWay) {
  std::mt19937 rng(20261130);
  int complete = 0;
  for (int round = 0; round < 100000; ++round) {
    const std::string data = RandomHead(rng);
    RequestHead h;
    size_t size = 0;
    if (ParseRequestHead(data, 8192, h, &size) != HeadParse::kComplete) continue;
    ++complete;
    bhttp::request_parser<bhttp::empty_body> p;
    boost::beast::error_code ec;
    const size_t used = p.put(boost::asio::buffer(data), ec);
    ASSERT_FALSE(ec) << ec.message() << "\n" << data;
    ASSERT_TRUE(p.is_header_done()) << data;
    ASSERT_TRUE(p.is_done()) << data;  // no body
    EXPECT_EQ(used, size) << data;
    const auto& m = p.get();
    EXPECT_EQ(m.method_string(), h.method) << data;
    EXPECT_EQ(m.target(), h.target) << data;
    EXPECT_EQ(m.version(), h.version) << data;
    EXPECT_EQ(m.keep_alive(), h.keep_alive) << data;
    EXPECT_EQ(p.chunked(), h.chunked) << data;
    // The same fields, and fields of one name in the same order. (Beast's container moves a
    // repeated name next to its first occurrence; the fast path keeps the order as sent.)
    auto by_name = [](std::vector<std::pair<std::string, std::string>> v) {
      for (auto& [name, value] : v) {
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      }
      std::stable_sort(v.begin(), v.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      return v;
    };
    std::vector<std::pair<std::string, std::string>> beast_fields, fast_fields;
    for (const auto& f : m) beast_fields.emplace_back(f.name_string(), f.value());
    for (const auto& f : h.fields) fast_fields.emplace_back(f.name, f.value);
    EXPECT_EQ(by_name(beast_fields), by_name(fast_fields)) << data;
  }
  EXPECT_GT(complete, 3000);  // the generator reaches the common shape often enough
}

}  // namespace
}  // namespace tollgate::http
