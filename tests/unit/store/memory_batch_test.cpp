// MemoryStore::ApplyNowMany(): the same decisions, results and final state as ApplyNow() called
// once per batch, in order.
#include <tollgate/store/memory_store.hpp>

#include <array>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/fake_clock.hpp"
#include "support/limits.hpp"

namespace tollgate::store {
namespace {

using core::Decision;
using core::Duration;
using core::Instant;
using core::Limit;

Limit Window(core::Algorithm algorithm, int64_t limit) {
  return Limit::Create({.algorithm = algorithm, .limit = limit, .window = Duration::Seconds(1)})
      .value();
}

// Tight limits of every algorithm, so that a random mix rejects often.
struct Limits {
  Limit burst = testing::Bucket(2, "1");
  Limit smooth = Limit::Create({.algorithm = core::Algorithm::kTokenBucket,
                                .capacity = 2,
                                .refill = core::Rate::Of(2, Duration::Seconds(1)),
                                .max_delay = Duration::Millis(500)})
                     .value();
  Limit quota = Limit::Create({.algorithm = core::Algorithm::kQuota, .ceiling = 5}).value();
  Limit log = Window(core::Algorithm::kSlidingWindowLog, 2);
  Limit counter = Window(core::Algorithm::kSlidingWindowCounter, 3);
  Limit fixed = Window(core::Algorithm::kFixedWindow, 2);
  std::array<const Limit*, 6> all() const {
    return {&burst, &smooth, &quota, &log, &counter, &fixed};
  }
};

constexpr std::array<const char*, 6> kNames = {"burst", "smooth",  "daily",
                                               "log",   "counter", "fixed"};

// A batch and the storage its views point into.
struct OwnedBatch {
  std::string scope;
  std::vector<std::string> check_scopes;
  std::vector<Check> checks;
  Mode mode = Mode::kConsume;
  std::optional<Instant> now;
  Batch View() const { return Batch{.scope = scope, .checks = checks, .mode = mode, .now = now}; }
};

OwnedBatch RandomBatch(std::mt19937_64& rng, const Limits& limits, int64_t step_ms, Instant& now) {
  auto pick = [&rng](size_t n) { return static_cast<size_t>(rng() % n); };
  OwnedBatch b;
  b.scope = "key:" + std::to_string(pick(24));  // few scopes: repeats inside a group
  b.mode = pick(8) == 0 ? Mode::kPeek : Mode::kConsume;
  now = now + Duration::Millis(static_cast<int64_t>(pick(static_cast<size_t>(step_ms))));
  if (pick(6) != 0) b.now = now;  // else the store's clock
  // Sometimes more than a batch may hold (kProtocol), else 1..4 checks of distinct names.
  const size_t n = pick(40) == 0 ? 17 : 1 + pick(4);
  const size_t first = pick(kNames.size());
  b.check_scopes.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t k = (first + i) % kNames.size();
    Check c{kNames[k], limits.all()[k], static_cast<int64_t>(pick(3))};
    c.enforced = pick(5) != 0;  // else shadow
    c.may_delay = pick(2) == 0;
    if (pick(10) == 0) b.check_scopes[i] = "ip:" + std::to_string(pick(6));  // across shards
    b.checks.push_back(c);
  }
  for (size_t i = 0; i < n; ++i) b.checks[i].scope = b.check_scopes[i];
  return b;
}

void ExpectSameDecision(const Decision& a, const Decision& b, const std::string& where) {
  EXPECT_EQ(a.allowed, b.allowed) << where;
  EXPECT_EQ(a.code, b.code) << where;
  EXPECT_EQ(a.limit, b.limit) << where;
  EXPECT_EQ(a.remaining, b.remaining) << where;
  EXPECT_EQ(a.reset.micros(), b.reset.micros()) << where;
  EXPECT_EQ(a.retry_after.micros(), b.retry_after.micros()) << where;
  EXPECT_EQ(a.used, b.used) << where;
  EXPECT_EQ(a.over_allowance, b.over_allowance) << where;
  EXPECT_EQ(a.delay.micros(), b.delay.micros()) << where;
}

void ExpectSameResult(const ApplyResult& a, const ApplyResult& b, const std::string& where) {
  EXPECT_EQ(a.error, b.error) << where;
  EXPECT_EQ(a.committed, b.committed) << where;
  if (a.error == StoreErrc::kOk) {
    EXPECT_EQ(a.now, b.now) << where;
  }
}

// Every (scope, check) the mix can have touched, peeked at cost 0 in both stores.
void ExpectSameState(MemoryStore& one, MemoryStore& many, const Limits& limits, Instant at) {
  EXPECT_EQ(one.size(), many.size());
  EXPECT_EQ(one.stats().evicted_live.load(), many.stats().evicted_live.load());
  EXPECT_EQ(one.stats().expired.load(), many.stats().expired.load());
  EXPECT_EQ(one.stats().full_rejections.load(), many.stats().full_rejections.load());
  std::vector<std::string> scopes;
  for (int i = 0; i < 24; ++i) scopes.push_back("key:" + std::to_string(i));
  for (int i = 0; i < 6; ++i) scopes.push_back("ip:" + std::to_string(i));
  for (const std::string& scope : scopes) {
    for (size_t k = 0; k < kNames.size(); ++k) {
      const std::array<Check, 1> check = {Check{kNames[k], limits.all()[k], 0}};
      const Batch peek{.scope = scope, .checks = check, .mode = Mode::kPeek, .now = at};
      std::array<Decision, 1> a, b;
      (void)one.ApplyNow(peek, a);
      (void)many.ApplyNow(peek, b);
      ExpectSameDecision(a[0], b[0], scope + "/" + kNames[k]);
    }
  }
}

// What a mix exercised, so that a test can require it.
struct Seen {
  size_t committed = 0;
  size_t refused = 0;  // not committed, no error
  size_t errors = 0;
  uint64_t evicted = 0;
  uint64_t full_rejections = 0;
};

// Runs `groups` random groups through both paths, time moving on by up to `step_ms` per batch;
// `max_keys` small puts the shards under eviction pressure, and a small step keeps their state
// rejecting (full rejections).
Seen RunMix(uint64_t seed, size_t max_keys, int64_t step_ms, size_t groups) {
  Seen seen;
  const Limits limits;
  testing::FakeClock clock;
  const MemoryStoreOptions options{.max_keys = max_keys, .shards = 2};
  MemoryStore one(options, clock);
  MemoryStore many(options, clock);
  std::mt19937_64 rng(seed);
  Instant now = clock.Now();
  for (size_t g = 0; g < groups; ++g) {
    std::vector<OwnedBatch> owned;
    const size_t size = 1 + static_cast<size_t>(rng() % 40);
    for (size_t i = 0; i < size; ++i) owned.push_back(RandomBatch(rng, limits, step_ms, now));
    clock.Set(now);
    std::vector<Batch> batches;
    size_t total = 0;
    for (const OwnedBatch& b : owned) {
      batches.push_back(b.View());
      total += b.checks.size();
    }
    std::vector<Decision> expected(total), got(total);
    std::vector<ApplyResult> expected_results(size), got_results(size);
    size_t offset = 0;
    for (size_t i = 0; i < size; ++i) {
      expected_results[i] =
          one.ApplyNow(batches[i], std::span(expected).subspan(offset, batches[i].checks.size()));
      offset += batches[i].checks.size();
    }
    many.ApplyNowMany(batches, got, got_results);
    offset = 0;
    for (size_t i = 0; i < size; ++i) {
      const std::string where = "seed " + std::to_string(seed) + " group " + std::to_string(g) +
                                " batch " + std::to_string(i) + " " + owned[i].scope;
      ExpectSameResult(expected_results[i], got_results[i], where);
      const ApplyResult& r = expected_results[i];
      ++(r.error != StoreErrc::kOk ? seen.errors : r.committed ? seen.committed : seen.refused);
      if (expected_results[i].error == StoreErrc::kOk) {
        for (size_t c = 0; c < batches[i].checks.size(); ++c) {
          ExpectSameDecision(expected[offset + c], got[offset + c],
                             where + " check " + std::to_string(c));
        }
      }
      offset += batches[i].checks.size();
    }
    if (::testing::Test::HasFailure()) return seen;
  }
  ExpectSameState(one, many, limits, now);
  seen.evicted = one.stats().evicted_live.load() + one.stats().expired.load();
  seen.full_rejections = one.stats().full_rejections.load();
  return seen;
}

TEST(MemoryStoreBatch, ManyMatchesOneAtATime) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const Seen seen = RunMix(seed, 10'000, 120, 300);
    EXPECT_GT(seen.committed, 500u);
    EXPECT_GT(seen.refused, 500u);
    EXPECT_GT(seen.errors, 0u);
  }
}

TEST(MemoryStoreBatch, ManyMatchesOneAtATimeUnderEvictionPressure) {
  for (uint64_t seed = 11; seed <= 14; ++seed) {
    const Seen seen = RunMix(seed, 40, 3, 300);
    EXPECT_GT(seen.evicted, 100u);
    EXPECT_GT(seen.full_rejections, 0u);
  }
}

TEST(MemoryStoreBatch, ALaterBatchSeesWhatAnEarlierOneConsumed) {
  const Limit burst = testing::Bucket(2, "0.001");
  testing::FakeClock clock;
  MemoryStore store(MemoryStoreOptions{.max_keys = 100, .shards = 4}, clock);
  const std::array<Check, 1> checks = {Check{"burst", &burst, 1}};
  const std::vector<Batch> batches(3, Batch{.scope = "key:a", .checks = checks});
  std::array<Decision, 3> out;
  std::array<ApplyResult, 3> results;
  store.ApplyNowMany(batches, out, results);
  EXPECT_TRUE(results[0].committed);
  EXPECT_TRUE(results[1].committed);
  EXPECT_FALSE(results[2].committed);
  EXPECT_EQ(out[0].remaining, 1);
  EXPECT_EQ(out[1].remaining, 0);
  EXPECT_FALSE(out[2].allowed);
}

TEST(MemoryStoreBatch, ABatchWhoseDecisionsDoNotFitFailsAlone) {
  const Limit burst = testing::Bucket(5, "1");
  testing::FakeClock clock;
  MemoryStore store(MemoryStoreOptions{.max_keys = 100, .shards = 4}, clock);
  const std::array<Check, 2> checks = {Check{"burst", &burst, 1}, Check{"other", &burst, 1}};
  const std::vector<Batch> batches(2, Batch{.scope = "key:a", .checks = checks});
  std::array<Decision, 3> out;  // room for the first batch only
  std::array<ApplyResult, 2> results;
  store.ApplyNowMany(batches, out, results);
  EXPECT_TRUE(results[0].committed);
  EXPECT_EQ(results[1].error, StoreErrc::kProtocol);
  EXPECT_EQ(store.size(), 2u);
}

}  // namespace
}  // namespace tollgate::store
