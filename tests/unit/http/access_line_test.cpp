#include "http/access_line.hpp"

#include <string>

#include <gtest/gtest.h>

#include "replay/log_line.hpp"

namespace tollgate::http {
namespace {

RequestLog Routed() {
  RequestLog log;
  log.key_id = "k1";
  log.plan = "free";
  log.route = "GET /v1/export";
  log.cost_param = "pages";
  log.decision = contract::LogDecision::kAllowed;
  log.cost = 3;
  log.upstream_status = 200;
  return log;
}

AccessLineFacts Facts() {
  return {.method = "GET",
          .path = "/v1/export",
          .query = "token=secret&pages=120&pages=7",
          .status = 200,
          .client = "203.0.113.7",
          .peer = "10.0.0.1",
          .request_id = "req-1",
          .latency_us = 12'345,
          .decided_us = 1'764'000'000'123'456};
}

// The line after its "ts" member.
std::string_view AfterTs(std::string_view line) {
  const size_t end = line.find("\",\"method\"");
  return end == std::string_view::npos ? std::string_view() : line.substr(end + 2);
}

TEST(AccessLine, WritesEveryMemberInOrder) {
  std::string line = "left over";
  RenderAccessLine(line, Routed(), Facts());
  ASSERT_TRUE(line.starts_with("{\"ts\":\"20")) << line;
  EXPECT_EQ(AfterTs(line),
            "\"method\":\"GET\",\"path\":\"/v1/export\",\"query\":\"pages=120&pages=7\","
            "\"status\":200,\"client\":\"203.0.113.7\",\"peer\":\"10.0.0.1\","
            "\"request_id\":\"req-1\",\"key_id\":\"k1\",\"plan\":\"free\","
            "\"route\":\"GET /v1/export\",\"decision\":\"allowed\",\"cost\":3,"
            "\"upstream_status\":200,\"latency_ms\":12.345,\"decided_us\":1764000000123456}\n");
}

TEST(AccessLine, KeepsNoQueryWithoutACostParameterAndNoDecisionTimeUnrouted) {
  RequestLog log;  // answered before routing (a 400, say)
  AccessLineFacts facts = Facts();
  facts.status = 400;
  facts.latency_us = 7;
  std::string line;
  RenderAccessLine(line, log, facts);
  EXPECT_EQ(AfterTs(line),
            "\"method\":\"GET\",\"path\":\"/v1/export\",\"query\":\"\",\"status\":400,"
            "\"client\":\"203.0.113.7\",\"peer\":\"10.0.0.1\",\"request_id\":\"req-1\","
            "\"key_id\":\"\",\"plan\":\"\",\"route\":\"\",\"decision\":\"none\",\"cost\":0,"
            "\"upstream_status\":0,\"latency_ms\":0.007}\n");
}

TEST(AccessLine, EscapesClientBytes) {
  AccessLineFacts facts = Facts();
  facts.path = "/a\"b\\c\n";
  facts.method = "G\x01T";
  std::string line;
  RenderAccessLine(line, Routed(), facts);
  EXPECT_NE(line.find("\"path\":\"/a\\\"b\\\\c\\u000a\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"method\":\"G\\u0001T\""), std::string::npos) << line;
}

TEST(AccessLine, ReplayReadsWhatItWrites) {
  AccessLineFacts facts = Facts();
  facts.path = "/v1/\"quoted\"";
  std::string line;
  RenderAccessLine(line, Routed(), facts);
  ASSERT_EQ(line.back(), '\n');
  replay::LogLine parsed;
  std::string scratch;
  ASSERT_EQ(
      replay::ParseLogLine(std::string_view(line).substr(0, line.size() - 1), parsed, scratch),
      nullptr)
      << line;
  EXPECT_EQ(parsed.method, "GET");
  EXPECT_EQ(parsed.path, "/v1/\"quoted\"");
  EXPECT_EQ(parsed.query, "pages=120&pages=7");
  EXPECT_EQ(parsed.status, 200);
  EXPECT_EQ(parsed.client, "203.0.113.7");
  EXPECT_EQ(parsed.key_id, "k1");
  EXPECT_EQ(parsed.route, "GET /v1/export");
  EXPECT_EQ(parsed.decision, "allowed");
  EXPECT_EQ(parsed.latency_us, 12'345);
  EXPECT_EQ(parsed.decided_us, 1'764'000'000'123'456);
  EXPECT_GT(parsed.ts_micros, 0);
}

}  // namespace
}  // namespace tollgate::http
