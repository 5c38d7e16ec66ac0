// The same decision sequences on MemoryStore and RedisStore must give the same answers.
#include <tollgate/store/redis_store.hpp>

#include <algorithm>
#include <cmath>
#include <future>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <tollgate/store/memory_store.hpp>
#include "support/apply_sync.hpp"
#include "support/redis_server.hpp"
#include "support/wait.hpp"

namespace tollgate::store {
namespace {

using core::Algorithm;
using core::Decision;
using core::Duration;
using core::Limit;

using testing::ApplySync;

std::string Describe(const Decision& d) {
  return "allowed=" + std::to_string(d.allowed) +
         " code=" + std::to_string(static_cast<int>(d.code)) + " limit=" + std::to_string(d.limit) +
         " remaining=" + std::to_string(d.remaining) +
         " reset=" + std::to_string(d.reset.micros()) +
         " retry=" + (d.retry_after.IsInfinite() ? "inf" : std::to_string(d.retry_after.micros())) +
         " used=" + std::to_string(d.used) + " over=" + std::to_string(d.over_allowance) +
         " delay=" + std::to_string(d.delay.micros());
}

class ConformanceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new testing::RedisServer(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    auto r = RedisStore::Create({.url = server_->url(), .prefix = "conf", .timeout_ms = 2000});
    ASSERT_TRUE(r.ok()) << r.error();
    redis_ = std::move(r).value();
  }

  // Applies `batch` to both stores; they must agree on the commit and decision for decision.
  // Returns Redis's answer. `where` names the case in failure messages.
  ApplyResult ExpectAgreement(const Batch& batch, const std::string& where) {
    std::vector<Decision> m(batch.checks.size()), r(batch.checks.size());
    const ApplyResult mr = ApplySync(memory_, batch, m);
    const ApplyResult rr = ApplySync(*redis_, batch, r);
    EXPECT_EQ(rr.error, StoreErrc::kOk) << rr.message;
    EXPECT_EQ(mr.committed, rr.committed) << where;
    for (size_t i = 0; i < m.size(); ++i) {
      EXPECT_EQ(Describe(m[i]), Describe(r[i]))
          << where << " check " << i << " algorithm "
          << core::AlgorithmName(batch.checks[i].limit->algorithm());
    }
    return rr;
  }

  static testing::RedisServer* server_;
  MemoryStore memory_{MemoryStoreOptions{.max_keys = 100'000, .shards = 4}};
  std::unique_ptr<RedisStore> redis_;
};
testing::RedisServer* ConformanceTest::server_ = nullptr;

Limit RandomLimit(std::mt19937_64& rng) {
  const char* rates[] = {"0.5", "1", "3", "50", "7.25"};
  switch (rng() % 6) {
    case 0:
    case 1:
      return Limit::Create({.algorithm = Algorithm::kTokenBucket,
                            .capacity = 1 + static_cast<int64_t>(rng() % 20),
                            .refill = core::Rate::Parse(rates[rng() % 5], 1).value()})
          .value();
    case 2:
      return Limit::Create({.algorithm = Algorithm::kSlidingWindowLog,
                            .limit = 1 + static_cast<int64_t>(rng() % 10),
                            .window = Duration::Millis(500 + static_cast<int64_t>(rng() % 5000))})
          .value();
    case 3:
      return Limit::Create({.algorithm = Algorithm::kSlidingWindowCounter,
                            .limit = 1 + static_cast<int64_t>(rng() % 10),
                            .window = Duration::Millis(500 + static_cast<int64_t>(rng() % 5000))})
          .value();
    case 4:
      return Limit::Create({.algorithm = Algorithm::kFixedWindow,
                            .limit = 1 + static_cast<int64_t>(rng() % 10),
                            .window = Duration::Millis(500 + static_cast<int64_t>(rng() % 5000))})
          .value();
    default: {
      const bool soft = rng() % 2;
      const int64_t allowance = 5 + static_cast<int64_t>(rng() % 20);
      return Limit::Create({.algorithm = Algorithm::kQuota,
                            .period = rng() % 2 ? core::Period::kDay : core::Period::kMonth,
                            .allowance = soft ? std::optional<int64_t>(allowance) : std::nullopt,
                            .ceiling = allowance * (soft ? 3 : 1)})
          .value();
    }
  }
}

TEST_F(ConformanceTest, RandomSequencesAgreeDecisionForDecision) {
  // Times near the real clock, advancing faster than it, so Redis TTLs never run out early.
  const int64_t base = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    std::vector<Limit> limits;
    const size_t n = 1 + rng() % 3;
    for (size_t i = 0; i < n; ++i) limits.push_back(RandomLimit(rng));
    const std::string names[] = {"a", "b", "c"};
    std::vector<Check> checks;
    for (size_t i = 0; i < n; ++i) checks.push_back({names[i], &limits[i], 1, rng() % 4 != 0});
    const std::string scope = "seed:" + std::to_string(seed);
    int64_t now = base + static_cast<int64_t>(rng() % 1'000'000);
    for (int step = 0; step < 120; ++step) {
      now += static_cast<int64_t>(rng() % 400) * 1000 + 1000;
      for (auto& c : checks) c.cost = rng() % 10 == 0 ? 1 + static_cast<int64_t>(rng() % 25) : 1;
      const Mode mode = rng() % 8 == 0 ? Mode::kPeek : Mode::kConsume;
      const Batch batch{.scope = scope,
                        .checks = checks,
                        .mode = mode,
                        .now = core::Instant::FromUnixMicros(now)};
      ExpectAgreement(batch, "seed " + std::to_string(seed) + " step " + std::to_string(step));
      if (HasFailure()) return;
    }
  }
}

// Route limits (issue 20): one request's checks in several scopes (its key's, its address's, a
// budget every caller shares), still all-or-nothing. Several callers interleave on the shared
// scopes; both stores must give the same answers, decision for decision.
TEST_F(ConformanceTest, BatchesSpanningScopesAgreeAndAreAllOrNothing) {
  const int64_t base = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed * 104729);
    std::vector<Limit> limits;
    for (int i = 0; i < 4; ++i) limits.push_back(RandomLimit(rng));
    const std::string run = std::to_string(seed);
    const std::string global = "global:" + run;
    const std::string addresses[] = {"ip:a" + run, "ip:b" + run};
    int64_t now = base + static_cast<int64_t>(rng() % 1'000'000);
    for (int step = 0; step < 150; ++step) {
      now += static_cast<int64_t>(rng() % 300) * 1000 + 1000;
      const std::string key = "key:" + run + ":" + std::to_string(rng() % 3);
      const std::string& address = addresses[rng() % 2];
      const int64_t cost = rng() % 6 == 0 ? 1 + static_cast<int64_t>(rng() % 5) : 1;
      // The key's own limit, the route's per-address and global limits, a shadow global one.
      const std::vector<Check> checks = {
          {"burst", &limits[0], cost, true, ""},
          {"route:per-ip", &limits[1], cost, true, address},
          {"route:upstream", &limits[2], cost, true, global},
          {"route:watch", &limits[3], cost, false, global},
      };
      const Batch batch{.scope = key,
                        .checks = checks,
                        .mode = rng() % 10 == 0 ? Mode::kPeek : Mode::kConsume,
                        .now = core::Instant::FromUnixMicros(now)};
      ExpectAgreement(batch, "seed " + run + " step " + std::to_string(step));
      if (HasFailure()) return;
    }
  }
}

// Smoothing (issue 20): delayed reservations on both paths of the script (token buckets alone;
// with a quota, the general path), requests that may not be held, costs above 1.
TEST_F(ConformanceTest, SmoothingReservesTheSameSlotsInBothStores) {
  const int64_t base = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  const char* rates[] = {"1", "3", "50", "7.25", "0.5"};
  const Limit quota = Limit::Create({.algorithm = Algorithm::kQuota, .ceiling = 1'000'000}).value();
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed * 7727);
    const Limit smooth =
        Limit::Create({.capacity = 1 + static_cast<int64_t>(rng() % 5),
                       .refill = core::Rate::Parse(rates[rng() % 5], 1).value(),
                       .max_delay = Duration::Millis(1 + static_cast<int64_t>(rng() % 3000))})
            .value();
    const bool general = seed % 2 == 0;
    const std::string scope = "smooth:" + std::to_string(seed);
    int64_t now = base + static_cast<int64_t>(rng() % 1'000'000);
    for (int step = 0; step < 100; ++step) {
      now += static_cast<int64_t>(rng() % 150) * 1000;
      const int64_t cost = rng() % 5 == 0 ? 2 : 1;
      std::vector<Check> checks = {{"burst", &smooth, cost, true, "", rng() % 6 != 0}};
      if (general) checks.push_back({"daily", &quota, cost});
      const Batch batch{
          .scope = scope, .checks = checks, .now = core::Instant::FromUnixMicros(now)};
      ExpectAgreement(batch, "seed " + std::to_string(seed) + " step " + std::to_string(step));
      if (HasFailure()) return;
    }
  }
}

// A rejection by one scope consumes nothing in the others, in both stores.
TEST_F(ConformanceTest, ARejectionInOneScopeConsumesNothingInTheOthers) {
  const int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const Limit roomy = Limit::Create({.algorithm = Algorithm::kTokenBucket,
                                     .capacity = 10,
                                     .refill = core::Rate::Parse("0.001", 1).value()})
                          .value();
  const Limit one = Limit::Create({.algorithm = Algorithm::kTokenBucket,
                                   .capacity = 1,
                                   .refill = core::Rate::Parse("0.001", 1).value()})
                        .value();
  const std::vector<Check> first = {{"burst", &roomy, 1, true, ""},
                                    {"route:upstream", &one, 1, true, "global:aon"}};
  const auto at = core::Instant::FromUnixMicros(now);
  // The first request takes the global token; the second is refused by it, and its key's bucket
  // stays where it was (9 left, not 8).
  EXPECT_TRUE(
      ExpectAgreement({.scope = "key:aon-1", .checks = first, .now = at}, "first").committed);
  EXPECT_FALSE(
      ExpectAgreement({.scope = "key:aon-2", .checks = first, .now = at}, "second").committed);
  const std::vector<Check> peek = {{"burst", &roomy, 0, true, ""}};
  std::vector<Decision> m(1), r(1);
  ApplySync(memory_, {.scope = "key:aon-2", .checks = peek, .mode = Mode::kPeek, .now = at}, m);
  ApplySync(*redis_, {.scope = "key:aon-2", .checks = peek, .mode = Mode::kPeek, .now = at}, r);
  EXPECT_EQ(m[0].remaining, 10);
  EXPECT_EQ(r[0].remaining, 10);
}

// Batches of token buckets only take the script's fast path; mixed batches the general one. Both
// read and write the same state ("deficit time"), so a key may move from one path to the other
// (a plan gaining a quota, state written before the fast path existed). Costs of 0 and above the
// capacity, peeks, shadow checks, rates that are awkward fractions.
TEST_F(ConformanceTest, TokenBucketPathAgreesAndSharesStateWithTheGeneralPath) {
  const int64_t base = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  const char* rates[] = {"0.5", "1", "3", "50", "7.25", "1000", "0.001"};
  const Limit quota = Limit::Create({.algorithm = Algorithm::kQuota, .ceiling = 1'000'000}).value();
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    std::mt19937_64 rng(seed * 7919);
    std::vector<Limit> limits;
    const size_t n = 1 + rng() % 3;
    for (size_t i = 0; i < n; ++i) {
      limits.push_back(Limit::Create({.algorithm = Algorithm::kTokenBucket,
                                      .capacity = 1 + static_cast<int64_t>(rng() % 30),
                                      .refill = core::Rate::Parse(rates[rng() % 7], 1).value()})
                           .value());
    }
    const std::string names[] = {"a", "b", "c"};
    const std::string scope = "tb:" + std::to_string(seed);
    int64_t now = base + static_cast<int64_t>(rng() % 1'000'000);
    for (int step = 0; step < 150; ++step) {
      now += static_cast<int64_t>(rng() % 300) * 1000 + static_cast<int64_t>(rng() % 1000);
      std::vector<Check> checks;
      for (size_t i = 0; i < n; ++i) {
        const uint64_t c = rng() % 20;
        const int64_t cost = c == 0   ? 0
                             : c == 1 ? 40
                             : c < 4  ? 1 + static_cast<int64_t>(rng() % 8)
                                      : 1;
        checks.push_back({names[i], &limits[i], cost, rng() % 5 != 0});
      }
      // One batch in five also carries a quota: the general path, on the same bucket keys.
      if (rng() % 5 == 0) checks.push_back({"q", &quota, 1, true});
      const Mode mode = rng() % 8 == 0 ? Mode::kPeek : Mode::kConsume;
      const Batch batch{.scope = scope,
                        .checks = checks,
                        .mode = mode,
                        .now = core::Instant::FromUnixMicros(now)};
      const ApplyResult rr =
          ExpectAgreement(batch, "seed " + std::to_string(seed) + " step " + std::to_string(step));
      ASSERT_EQ(rr.now.unix_micros(), now);
      if (HasFailure()) return;
    }
  }
}

// Token-bucket requests that wait while others are in flight leave in groups, one script call
// each (the script's 'M' path, 'U' when no key is named twice). Sent all at once, in order, they
// must be decided exactly as the same requests applied one by one: several requests on one key
// in one group, peeks, shadow checks, costs of 0 and above the capacity, keys shared between
// identities' groups, and groups of many identities' keys each named once.
TEST_F(ConformanceTest, GroupedRequestsAgreeWithSequentialOnes) {
  const int64_t base = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  const char* rates[] = {"0.5", "3", "50", "7.25", "1000"};
  std::mt19937_64 rng(4242);
  std::vector<Limit> limits;
  for (int i = 0; i < 6; ++i) {
    const int64_t capacity = 1 + static_cast<int64_t>(rng() % 40);
    const char* rate = rates[rng() % 5];
    // Redis expires a key C/r after its last write by its own clock, and this test's clock is
    // its own: a window of at least 10 s keeps every key for the whole run, however slow (a 9 ms
    // window lapsed between two requests of a run under ASan, and Redis saw a full bucket).
    const auto min_capacity = static_cast<int64_t>(std::ceil(10 * std::stod(rate)));
    limits.push_back(Limit::Create({.algorithm = Algorithm::kTokenBucket,
                                    .capacity = std::max(capacity, min_capacity),
                                    .refill = core::Rate::Parse(rate, 1).value()})
                         .value());
  }
  const std::string names[] = {"a", "b"};
  constexpr int kRequests = 600;
  std::vector<Batch> batches;
  std::vector<std::vector<Check>> checks(kRequests);
  std::vector<std::string> scopes(kRequests);
  int64_t now = base;
  for (int i = 0; i < kRequests; ++i) {
    if (rng() % 50 == 0) now += static_cast<int64_t>(rng() % 200'000);  // groups split on `now`
    // Few identities: many requests per key per group; and a run of one busy identity's
    // requests (whose keys a group sends once).
    // Then many identities, each seen a few times in all: most groups name every key once.
    const bool busy = i >= 100 && i < 180;
    const bool many = i >= 400;
    const size_t n = busy ? 1 : 1 + rng() % 2;
    const size_t scope = busy ? 0 : many ? 5 + rng() % 100 : rng() % 5;
    for (size_t c = 0; c < n; ++c) {
      const uint64_t r = rng() % 20;
      const int64_t cost = r == 0 ? 0 : r == 1 ? 60 : 1 + static_cast<int64_t>(rng() % 3);
      checks[i].push_back({names[c], &limits[scope % 5 + c], cost, rng() % 6 != 0});
    }
    scopes[i] = "group:" + std::to_string(scope);
    batches.push_back(Batch{.scope = scopes[i],
                            .checks = checks[i],
                            .mode = rng() % 8 == 0 ? Mode::kPeek : Mode::kConsume,
                            .now = core::Instant::FromUnixMicros(now)});
  }
  std::vector<std::vector<Decision>> redis(kRequests);
  std::vector<std::promise<ApplyResult>> replies(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    redis[i].resize(checks[i].size());
    redis_->Apply(batches[i], redis[i],
                  [&replies, i](ApplyResult&& r) { replies[i].set_value(std::move(r)); });
  }
  std::vector<ApplyResult> answers;
  for (auto& reply : replies)
    answers.push_back(reply.get_future().get());  // all in before any check
  int rejected = 0;
  for (int i = 0; i < kRequests; ++i) {
    const ApplyResult& rr = answers[i];
    ASSERT_EQ(rr.error, StoreErrc::kOk) << rr.message;
    std::vector<Decision> m(checks[i].size());
    const ApplyResult mr = ApplySync(memory_, batches[i], m);
    EXPECT_EQ(mr.committed, rr.committed) << "request " << i;
    rejected += batches[i].mode == Mode::kConsume && !mr.committed;
    for (size_t c = 0; c < m.size(); ++c)
      EXPECT_EQ(Describe(m[c]), Describe(redis[i][c])) << "request " << i;
    if (HasFailure()) return;
  }
  EXPECT_LT(redis_->stats().scripts.load(), redis_->stats().calls.load());  // grouped
  EXPECT_GE(rejected, 20);  // both outcomes, many times (29 rejections with this seed)
  EXPECT_LT(rejected, kRequests / 2);
}

// All-or-nothing on the fast path: one enforced bucket that rejects leaves every other bucket
// untouched, and a shadowed one that rejects blocks nothing.
TEST_F(ConformanceTest, TokenBucketPathIsAllOrNothing) {
  const Limit big = Limit::Create({.algorithm = Algorithm::kTokenBucket,
                                   .capacity = 10,
                                   .refill = core::Rate::Parse("0.001", 1).value()})
                        .value();
  const Limit small = Limit::Create({.algorithm = Algorithm::kTokenBucket,
                                     .capacity = 2,
                                     .refill = core::Rate::Parse("0.001", 1).value()})
                          .value();
  for (const bool enforced : {true, false}) {
    const std::string scope = enforced ? "aon:enforced" : "aon:shadow";
    const std::vector<Check> checks = {{"big", &big, 1}, {"small", &small, 1, enforced}};
    int committed = 0;
    for (int i = 0; i < 5; ++i) {
      std::vector<Decision> d(2);
      const ApplyResult r = ApplySync(*redis_, Batch{.scope = scope, .checks = checks}, d);
      ASSERT_EQ(r.error, StoreErrc::kOk) << r.message;
      committed += r.committed;
      EXPECT_EQ(d[1].allowed, i < 2);
      // Remaining of the big bucket: debited once per committed batch, never by a rejected one.
      EXPECT_EQ(d[0].remaining, 10 - committed);
    }
    EXPECT_EQ(committed, enforced ? 2 : 5);
  }
}

// Every bucket key the fast path writes lives at least until the bucket is full again, and at
// most as long as an empty bucket takes to refill (C/r): then Redis holds none of them. Keys
// written one call each and keys written by groups alike.
TEST_F(ConformanceTest, TokenBucketKeysLiveNoLongerThanTheirWindow) {
  testing::RedisServer server;
  auto r = RedisStore::Create({.url = server.url(), .prefix = "ttl", .timeout_ms = 2000});
  ASSERT_TRUE(r.ok()) << r.error();
  const Limit b = Limit::Create({.algorithm = Algorithm::kTokenBucket,
                                 .capacity = 4,
                                 .refill = core::Rate::Parse("20", 1).value()})
                      .value();  // 200 ms
  const std::vector<Check> checks = {{"burst", &b, 3}};
  auto expect_ttl = [&](int i) {
    const int64_t ttl = std::stoll(server.Cli("PTTL 'ttl:{k:" + std::to_string(i) + "}:burst:tb'"));
    EXPECT_GT(ttl, 150 - 50) << i;  // 3 tokens missing: full again in 150 ms (slack for a slow run)
    EXPECT_LE(ttl, 200) << i;
  };
  std::vector<Decision> d(1);
  ASSERT_TRUE(ApplySync(**r, Batch{.scope = "k:0", .checks = checks}, d).committed);
  expect_ttl(0);
  constexpr int kKeys = 500;
  std::vector<std::string> scopes(kKeys);
  std::vector<std::vector<Decision>> decisions(kKeys, std::vector<Decision>(1));
  std::vector<std::promise<ApplyResult>> replies(kKeys);
  for (int i = 1; i < kKeys; ++i) {  // all at once: they leave in groups
    scopes[i] = "k:" + std::to_string(i);
    (*r)->Apply(Batch{.scope = scopes[i], .checks = checks}, decisions[i],
                [&replies, i](ApplyResult&& a) { replies[i].set_value(std::move(a)); });
  }
  for (int i = 1; i < kKeys; ++i) ASSERT_TRUE(replies[i].get_future().get().committed) << i;
  EXPECT_LT((*r)->stats().scripts.load(), (*r)->stats().calls.load());  // grouped
  expect_ttl(kKeys - 1);
  // Every key, not just the two above: none without a TTL (-1), none with one past the window
  // (one already gone answers -2). Read in one script, so no key expires between two reads.
  std::string keys;
  for (int i = 0; i < kKeys; ++i) keys += " 'ttl:{k:" + std::to_string(i) + "}:burst:tb'";
  const std::string untimed_and_longest = server.Cli(
      "EVAL \"local none, longest = 0, -2 for _, k in ipairs(KEYS) do local t = "
      "redis.call('PTTL', k) if t == -1 then none = none + 1 end if t > longest then longest = t "
      "end end return {none, longest}\" " +
      std::to_string(kKeys) + keys);
  const size_t newline = untimed_and_longest.find('\n');
  ASSERT_NE(newline, std::string::npos) << untimed_and_longest;
  EXPECT_EQ(untimed_and_longest.substr(0, newline), "0") << "keys without a TTL";
  EXPECT_LE(std::stoll(untimed_and_longest.substr(newline + 1)), 200);
  // Then Redis lets them go: EXISTS expires what it touches.
  EXPECT_TRUE(testing::WaitUntil([&] { return server.Cli("EXISTS" + keys) == "0"; },
                                 testing::kDefaultWait, std::chrono::milliseconds(20)))
      << server.Cli("EXISTS" + keys);
}

TEST_F(ConformanceTest, RedisReadsItsOwnClockWhenNoTimeIsGiven) {
  const Limit b = Limit::Create({.algorithm = Algorithm::kTokenBucket,
                                 .capacity = 2,
                                 .refill = core::Rate::Parse("0.001", 1).value()})
                      .value();
  const std::vector<Check> checks = {{"burst", &b, 1}};
  std::vector<Decision> d(1);
  const auto before = std::chrono::system_clock::now();
  const ApplyResult r = ApplySync(*redis_, Batch{.scope = "clock", .checks = checks}, d);
  ASSERT_EQ(r.error, StoreErrc::kOk);
  const int64_t wall =
      std::chrono::duration_cast<std::chrono::microseconds>(before.time_since_epoch()).count();
  EXPECT_NEAR(static_cast<double>(r.now.unix_micros()), static_cast<double>(wall), 5e6);
  EXPECT_TRUE(d[0].allowed);
  EXPECT_EQ(d[0].remaining, 1);
}

}  // namespace
}  // namespace tollgate::store
