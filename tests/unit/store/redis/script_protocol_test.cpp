#include "store/redis/script_protocol.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "store/redis/resp.hpp"

namespace tollgate::store::redis {
namespace {

using core::Algorithm;
using core::Limit;

const std::string kSha(40, 'f');

Limit Bucket(int64_t capacity, int64_t tokens_per_second) {
  return Limit::Create({.algorithm = Algorithm::kTokenBucket,
                        .capacity = capacity,
                        .refill = core::Rate::Of(tokens_per_second, core::Duration::Seconds(1))})
      .value();
}
Limit DailyCeiling(int64_t ceiling) {
  return Limit::Create({.algorithm = Algorithm::kQuota, .ceiling = ceiling}).value();
}

// The request as RESP, written out argument by argument.
std::string Resp(std::initializer_list<std::string_view> args) {
  std::string out;
  AppendCommand(out, args);
  return out;
}

TEST(ScriptProtocol, KeySuffixPerAlgorithm) {
  EXPECT_STREQ(AlgorithmSuffix(Algorithm::kTokenBucket), "tb");
  EXPECT_STREQ(AlgorithmSuffix(Algorithm::kSlidingWindowLog), "log");
  EXPECT_STREQ(AlgorithmSuffix(Algorithm::kSlidingWindowCounter), "swc");
  EXPECT_STREQ(AlgorithmSuffix(Algorithm::kFixedWindow), "fw");
  EXPECT_STREQ(AlgorithmSuffix(Algorithm::kQuota), "q");
}

// 10 tokens, 1 per second: a token is 1,000,000 units; an empty bucket refills in 10 s.
TEST(ScriptProtocol, TokenBucketArguments) {
  const Limit burst = Bucket(10, 1);
  EXPECT_EQ(TokenBucketParams(burst, 3, true),
            (std::array<int64_t, 5>{3'000'000, 1, 10'000, 7'000'000, 1}));
  EXPECT_EQ(TokenBucketParams(burst, 0, false),
            (std::array<int64_t, 5>{0, 1, 10'000, 10'000'000, 0}));
  // A cost above the capacity never passes (room < 0) and needs nothing.
  EXPECT_EQ(TokenBucketParams(burst, 11, true), (std::array<int64_t, 5>{0, 1, 10'000, -1, 1}));
  // The key's TTL is at least 1 ms.
  EXPECT_EQ(TokenBucketParams(Bucket(1, 1'000'000), 1, true)[2], 1);
}

TEST(ScriptProtocol, GeneralArguments) {
  EXPECT_EQ(ScriptParams(Bucket(10, 1)), (std::array<int64_t, 4>{10, 1, 1'000'000, 0}));
  EXPECT_EQ(ScriptParams(DailyCeiling(250)), (std::array<int64_t, 4>{0, 0, 250, 0}));
  const Limit window = Limit::Create({.algorithm = Algorithm::kSlidingWindowCounter,
                                      .limit = 5,
                                      .window = core::Duration::Seconds(60)})
                           .value();
  EXPECT_EQ(ScriptParams(window), (std::array<int64_t, 4>{5, 60'000, 0, 0}));  // ms for this one
  // Smoothing: the debt is max_delay of refill (2 s at 1 token/s: 2,000,000 units), offered
  // only to a request that may be held.
  const Limit smooth = Limit::Create({.capacity = 10,
                                      .refill = core::Rate::Parse("1", 1).value(),
                                      .max_delay = core::Duration::Seconds(2)})
                           .value();
  EXPECT_EQ(ScriptParams(smooth), (std::array<int64_t, 4>{10, 1, 1'000'000, 2'000'000}));
  EXPECT_EQ(ScriptParams(smooth, false), (std::array<int64_t, 4>{10, 1, 1'000'000, 0}));
  // On the token-bucket path the debt widens the room, and the key lives until a bucket that
  // deep has refilled (12 s).
  EXPECT_EQ(TokenBucketParams(smooth, 3, true),
            (std::array<int64_t, 5>{3'000'000, 1, 12'000, 9'000'000, 1}));
  EXPECT_EQ(TokenBucketParams(smooth, 3, true, false),
            (std::array<int64_t, 5>{3'000'000, 1, 12'000, 7'000'000, 1}));
}

TEST(ScriptProtocol, ATokenBucketRequestTakesTheFastPath) {
  const Limit burst = Bucket(10, 1);
  const std::vector<Check> checks = {{"burst", &burst, 3}};
  ScriptRequest request;
  const std::string_view key =
      EncodeRequest(request, kSha, "t", Batch{.scope = "key:a", .checks = checks});
  EXPECT_EQ(key, "t:{key:a}:burst:tb");
  EXPECT_TRUE(request.fast);
  EXPECT_TRUE(request.consume);
  EXPECT_EQ(request.n, 1u);
  EXPECT_EQ(request.args, 11u);
  EXPECT_EQ(request.now_us, 0);
  EXPECT_EQ(request.command, Resp({"EVALSHA", kSha, "1", "t:{key:a}:burst:tb", "0", "B", "3000000",
                                   "1", "10000", "7000000", "1"}));
  // Where the pieces are, for groups and EVAL.
  EXPECT_EQ(request.command.substr(0, request.header_len),
            "*11\r\n$7\r\nEVALSHA\r\n$40\r\n" + kSha + "\r\n");
  EXPECT_EQ(request.command.substr(request.keys_begin, request.keys_end - request.keys_begin),
            "$18\r\nt:{key:a}:burst:tb\r\n");
  EXPECT_EQ(request.command.substr(request.params_begin),
            Resp({"3000000", "1", "10000", "7000000", "1"}).substr(4));
}

TEST(ScriptProtocol, OtherAlgorithmsTakeTheGeneralPath) {
  const Limit burst = Bucket(10, 1);
  const Limit daily = DailyCeiling(250);
  const std::vector<Check> checks = {{"burst", &burst, 1}, {"daily", &daily, 2, false}};
  ScriptRequest request;
  const auto now = core::Instant::FromUnixMicros(1'790'000'000'000'000);
  const std::string_view key =
      EncodeRequest(request, kSha, "p",
                    Batch{.scope = "ip:1", .checks = checks, .mode = Mode::kPeek, .now = now});
  EXPECT_EQ(key, "p:{ip:1}:burst:tb");
  EXPECT_FALSE(request.fast);
  EXPECT_FALSE(request.consume);
  EXPECT_EQ(request.args, 21u);
  EXPECT_EQ(request.now_us, 1'790'000'000'000'000);
  EXPECT_EQ(request.command, Resp({"EVALSHA",
                                   kSha,
                                   "2",
                                   "p:{ip:1}:burst:tb",
                                   "p:{ip:1}:daily:q",
                                   "1790000000000000",
                                   "0",  //
                                   "0",
                                   "1",
                                   "1",
                                   "10",
                                   "1",
                                   "1000000",
                                   "0",  // burst
                                   "4",
                                   "2",
                                   "0",
                                   "0",
                                   "0",
                                   "250",
                                   "0"}));  // daily
}

// The buffer is reused: a second request replaces the first.
TEST(ScriptProtocol, ARequestReusesItsBuffer) {
  const Limit burst = Bucket(10, 1);
  const std::vector<Check> two = {{"a", &burst, 1}, {"b", &burst, 1}};
  const std::vector<Check> none;
  ScriptRequest request;
  (void)EncodeRequest(request, kSha, "t", Batch{.scope = "s", .checks = two});
  EXPECT_EQ(EncodeRequest(request, kSha, "t", Batch{.scope = "s", .checks = none}), "");
  EXPECT_FALSE(request.fast);
  EXPECT_EQ(request.command, Resp({"EVALSHA", kSha, "0", "0", "1"}));
}

TEST(ScriptProtocol, EvalCarriesTheScriptAndTheSameArguments) {
  const Limit burst = Bucket(10, 1);
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  ScriptRequest request;
  (void)EncodeRequest(request, kSha, "t", Batch{.scope = "k", .checks = checks});
  EXPECT_EQ(EncodeEval(request, "return 1"), Resp({"EVAL", "return 1", "1", "t:{k}:burst:tb", "0",
                                                   "B", "1000000", "1", "10000", "9000000", "1"}));
}

// Two requests on the token-bucket path, `a` then `b`, of the same shape, in one group.
struct Group {
  Limit burst = Bucket(10, 1);
  std::vector<Check> checks = {{"burst", &burst, 1}};
  ScriptRequest a;
  ScriptRequest b;
  std::string Encode(std::string_view scope_a, std::string_view scope_b,
                     Mode mode_b = Mode::kConsume) {
    (void)EncodeRequest(a, kSha, "t", Batch{.scope = scope_a, .checks = checks});
    (void)EncodeRequest(b, kSha, "t", Batch{.scope = scope_b, .checks = checks, .mode = mode_b});
    a.next = &b;
    std::string out;
    GroupEncoder().Encode(out, kSha, &a);
    return out;
  }
};

// Each request's keys, the shape once, then per request 4 * (shape + 1) + 2 (same keys) + 1
// (consume).
TEST(ScriptProtocol, AGroupNamesEachShapeOnce) {
  Group g;
  EXPECT_EQ(g.Encode("x", "y"),
            Resp({"EVALSHA", kSha, "2", "t:{x}:burst:tb", "t:{y}:burst:tb", "0", "U", "1",  //
                  "1", "1000000", "1", "10000", "9000000", "1",                             //
                  "5", "5"}));
  EXPECT_EQ(g.a.shape, 0u);
  EXPECT_EQ(g.b.shape, 0u);
  EXPECT_FALSE(g.b.same_keys);
}

// One busy key's requests: its keys go once, and the script follows the key through the call.
TEST(ScriptProtocol, AGroupSendsRepeatedKeysOnce) {
  Group g;
  EXPECT_EQ(g.Encode("x", "x", Mode::kPeek),
            Resp({"EVALSHA", kSha, "1", "t:{x}:burst:tb", "0", "M", "1",  //
                  "1", "1000000", "1", "10000", "9000000", "1",           //
                  "5", "6"}));
  EXPECT_TRUE(g.b.same_keys);
}

TEST(ScriptProtocol, AGroupSendsEachDistinctShape) {
  Group g;
  const Limit other = Bucket(20, 1);
  const std::vector<Check> other_checks = {{"burst", &other, 1}};
  (void)EncodeRequest(g.a, kSha, "t", Batch{.scope = "x", .checks = g.checks});
  (void)EncodeRequest(g.b, kSha, "t", Batch{.scope = "y", .checks = other_checks});
  g.a.next = &g.b;
  std::string out;
  GroupEncoder().Encode(out, kSha, &g.a);
  EXPECT_EQ(out,
            Resp({"EVALSHA", kSha,      "2", "t:{x}:burst:tb", "t:{y}:burst:tb", "0", "U", "2",  //
                  "1",       "1000000", "1", "10000",          "9000000",        "1",            //
                  "1",       "1000000", "1", "20000",          "19000000",       "1",            //
                  "5",       "9"}));
  EXPECT_EQ(g.b.shape, 1u);
}

TEST(ScriptProtocol, DecodesTheGeneralReply) {
  const std::vector<int64_t> reply = {1'790'000'000'000'000,
                                      1,  //
                                      1,
                                      0,
                                      10,
                                      9,
                                      1'000'000,
                                      0,
                                      0,
                                      0,
                                      250'000,  // allowed, held 250 ms
                                      0,
                                      3,
                                      250,
                                      0,
                                      5'000'000,
                                      -1,
                                      250,
                                      1,
                                      0};  // rejected, never
  std::vector<core::Decision> d(3);
  const ApplyResult result = DecodeDecisions(reply, d);
  EXPECT_EQ(result.error, StoreErrc::kOk);
  EXPECT_TRUE(result.committed);
  EXPECT_EQ(result.now, core::Instant::FromUnixMicros(1'790'000'000'000'000));
  EXPECT_TRUE(d[0].allowed);
  EXPECT_EQ(d[0].limit, 10);
  EXPECT_EQ(d[0].remaining, 9);
  EXPECT_EQ(d[0].reset, core::Duration::Seconds(1));
  EXPECT_EQ(d[0].delay, core::Duration::Millis(250));
  EXPECT_FALSE(d[1].allowed);
  EXPECT_EQ(d[1].code, core::RejectCode::kCeilingExceeded);
  EXPECT_EQ(d[1].retry_after, core::Duration::Infinite());
  EXPECT_EQ(d[1].used, 250);
  EXPECT_TRUE(d[1].over_allowance);
  EXPECT_TRUE(d[2].allowed);  // beyond the checks: untouched
}

// From the deficits at `now`, the same decisions as the core math: all-or-nothing.
TEST(ScriptProtocol, TokenBucketDecisionsFromDeficits) {
  const Limit burst = Bucket(10, 1);
  const Limit small = Bucket(2, 1);
  const std::vector<Check> checks = {{"burst", &burst, 1}, {"small", &small, 1}};
  const auto now = core::Instant::FromUnixSeconds(1'790'000'000);
  std::vector<core::Decision> d(2);
  // Both full: both allow, and the script committed.
  ApplyResult r = DecideTokenBuckets(checks, true, now, std::vector<int64_t>{0, 0}, d);
  EXPECT_TRUE(r.committed);
  EXPECT_EQ(r.now, now);
  EXPECT_TRUE(d[0].allowed && d[1].allowed);
  EXPECT_EQ(d[0].remaining, 9);
  EXPECT_EQ(d[1].remaining, 1);
  // `small` empty: it rejects, so nothing is taken and `burst` reports its state as it is.
  r = DecideTokenBuckets(checks, true, now, std::vector<int64_t>{0, 2'000'000}, d);
  EXPECT_FALSE(r.committed);
  EXPECT_TRUE(d[0].allowed);
  EXPECT_EQ(d[0].remaining, 10);
  EXPECT_FALSE(d[1].allowed);
  EXPECT_EQ(d[1].retry_after, core::Duration::Seconds(1));
  // Peeking never commits.
  r = DecideTokenBuckets(checks, false, now, std::vector<int64_t>{0, 0}, d);
  EXPECT_FALSE(r.committed);
  EXPECT_EQ(d[0].remaining, 10);
}

// A shadow check that rejects does not stop the others.
TEST(ScriptProtocol, ShadowRejectionsCommitTheRest) {
  const Limit burst = Bucket(10, 1);
  const Limit small = Bucket(2, 1);
  const std::vector<Check> checks = {{"burst", &burst, 1}, {"small", &small, 1, false}};
  std::vector<core::Decision> d(2);
  const ApplyResult r = DecideTokenBuckets(checks, true, core::Instant::FromUnixSeconds(1),
                                           std::vector<int64_t>{0, 2'000'000}, d);
  EXPECT_TRUE(r.committed);
  EXPECT_EQ(d[0].remaining, 9);
  EXPECT_FALSE(d[1].allowed);
}

}  // namespace
}  // namespace tollgate::store::redis
