// ParseSimpleHead against Beast's response parser, which the gateway uses for every upstream
// head it leaves alone: on generated heads, anything it accepts Beast must accept the same way
// (tests/fuzz/upstream_head_fuzz.cpp does the same on arbitrary bytes).
#include "http/upstream_head.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <boost/beast/http.hpp>

#include "http/fields.hpp"

namespace tollgate::http {
namespace {

namespace bhttp = boost::beast::http;
using Fields = std::vector<std::pair<std::string, std::string>>;

std::string RandomHead(std::mt19937& rng) {
  auto pick = [&](std::initializer_list<const char*> xs) {
    return std::string(
        *(xs.begin() + std::uniform_int_distribution<size_t>(0, xs.size() - 1)(rng)));
  };
  std::string s = pick({"HTTP/1.1", "HTTP/1.0", "HTTP/1.1", "HTTP/2.0", "http/1.1"}) +
                  pick({" ", " ", "  "}) +
                  pick({"200", "201", "204", "304", "404", "429", "503", "100", "20", "2000"}) +
                  pick({" OK", " ", "", " Too Many Requests", " a\tb", " \x7f"}) + "\r\n";
  const int fields = std::uniform_int_distribution<int>(0, 5)(rng);
  for (int i = 0; i < fields; ++i) {
    s += pick({"Content-Type", "Content-Length", "Connection", "Transfer-Encoding", "Keep-Alive",
               "Set-Cookie", "ETag", "Upgrade", "Bad Name", "X=Y", "X-Empty"}) +
         pick({": ", ":", ":  ", " : "}) +
         pick({"v", "close", "keep-alive", "0", "00", "5", "Upgrade, close", "", "a\tb", "x ",
               "chunked", "a\rb", "\xe9t\xe9"}) +
         pick({"\r\n", "\r\n", "\r\n", "\n"});
  }
  s += pick({"\r\n", "\r\n", "\n"});
  // Now and then a byte changed anywhere.
  if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) {
    s[std::uniform_int_distribution<size_t>(0, s.size() - 1)(rng)] =
        static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
  }
  return s;
}

// Fields by lower-case name, in order within a name (Beast groups repeated names).
Fields ByName(Fields v) {
  for (auto& f : v) {
    for (char& c : f.first) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  std::stable_sort(v.begin(), v.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return v;
}

TEST(UpstreamHeadBeastTest, WhatItAcceptsBeastAcceptsTheSameWay) {
  std::mt19937 rng(20261202);
  int simple = 0;
  for (int round = 0; round < 100000; ++round) {
    const std::string data = RandomHead(rng);
    const bool is_head = round % 5 == 0;
    const size_t end = HeadEnd(data);
    if (end == std::string::npos) continue;
    SimpleHead h;
    if (!ParseSimpleHead(std::string_view(data).substr(0, end), is_head, h)) continue;
    ++simple;
    bhttp::response_parser<bhttp::empty_body> p;
    p.body_limit(boost::none);
    p.skip(is_head);
    boost::beast::error_code ec;
    const size_t used = p.put(boost::asio::buffer(data.data(), end), ec);
    ASSERT_FALSE(ec) << ec.message() << "\n" << data;
    ASSERT_TRUE(p.is_header_done()) << data;
    EXPECT_EQ(used, end) << data;
    const auto& m = p.get();
    EXPECT_EQ(m.result_int(), h.status) << data;
    if (!h.reason.empty()) {
      EXPECT_EQ(m.reason(), h.reason) << data;
    }
    EXPECT_EQ(m.version(), data[7] == '1' ? 11u : 10u) << data;
    EXPECT_EQ(m.keep_alive(), h.keep_alive) << data;
    EXPECT_FALSE(p.chunked()) << data;
    if (is_head || h.status == 204 || h.status == 304) {
      EXPECT_TRUE(p.is_done()) << data;
    } else {
      ASSERT_TRUE(h.content_length) << data;
      ASSERT_TRUE(p.content_length()) << data;
      EXPECT_EQ(*p.content_length(), *h.content_length) << data;
    }
    Fields beast, fast;
    for (const auto& f : m) {
      if (Classify(f.name_string()) == FieldKind::kEndToEnd) {
        beast.emplace_back(f.name_string(), f.value());
      }
    }
    for (size_t i = 0; i < h.line_count; ++i) {
      const auto& line = h.lines[i];
      fast.emplace_back(line.text.substr(0, line.name_size),
                        util::Trim(line.text.substr(line.name_size + 1)));
    }
    EXPECT_EQ(ByName(beast), ByName(fast)) << data;
  }
  std::printf("%d of 100000 heads of the simple shape\n", simple);
  EXPECT_GT(simple, 500);  // the generator reaches the common shape often enough
}

}  // namespace
}  // namespace tollgate::http
