#include <tollgate/engine/deny_cache.hpp>

#include <optional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <tollgate/store/leasing_store.hpp>
#include <tollgate/store/memory_store.hpp>
#include "support/fake_clock.hpp"
#include "support/limits.hpp"

namespace tollgate::engine {
namespace {

using core::Decision;
using core::Duration;
using core::Limit;
using store::ApplyResult;
using store::Batch;
using store::Check;
using testing::Bucket;

// Counts calls to the store behind the cache.
class CountingStore final : public store::Store {
 public:
  explicit CountingStore(store::Store& inner) : inner_(inner) {}
  void Apply(const Batch& b, std::span<Decision> d, Completion done) override {
    ++calls;
    inner_.Apply(b, d, std::move(done));
  }
  std::string_view Name() const override { return "counting"; }
  int calls = 0;

 private:
  store::Store& inner_;
};

ApplyResult ApplySync(store::Store& s, const Batch& b, std::span<Decision> d) {
  ApplyResult out;
  s.Apply(b, d, [&](ApplyResult&& r) { out = std::move(r); });
  return out;
}

TEST(DenyCache, FloodingClientCostsTheStoreAlmostNothing) {
  testing::FakeClock clock;
  store::MemoryStore memory({.max_keys = 100, .shards = 1}, clock);
  CountingStore counting(memory);
  DenyCache cache(counting, {}, clock);
  const Limit b = Bucket(5, "1");
  const std::vector<Check> checks = {{"burst", &b, 1}};
  std::vector<Decision> d(1);
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(ApplySync(cache, {.scope = "k", .checks = checks}, d).committed);
  const int before = counting.calls;
  for (int i = 0; i < 1000; ++i) {
    const ApplyResult r = ApplySync(cache, {.scope = "k", .checks = checks}, d);
    ASSERT_FALSE(r.committed);
    ASSERT_FALSE(d[0].allowed);
    ASSERT_GE(d[0].retry_after, Duration::Micros(1));
    ASSERT_LE(d[0].retry_after, Duration::Seconds(1));
  }
  EXPECT_LE(counting.calls - before, 1);  // the first rejection comes from the store
  EXPECT_GE(cache.stats().local_rejections.load(), 999u);
  clock.Advance(Duration::Seconds(1));  // one token back: the store is asked again
  EXPECT_TRUE(ApplySync(cache, {.scope = "k", .checks = checks}, d).committed);
}

// A reload replaces the policy's limits; the new one may take the freed one's address. A bound
// made for the old bucket does not hold for a larger one at the same address.
TEST(DenyCache, ABoundIsForTheBucketItWasMadeFor) {
  testing::FakeClock clock;
  store::MemoryStore memory({.max_keys = 100, .shards = 1}, clock);
  DenyCache cache(memory, {}, clock);
  std::optional<Limit> limit(Bucket(1, "0.001"));
  const std::vector<Check> checks = {{"burst", &*limit, 1}};
  std::vector<Decision> d(1);
  ASSERT_TRUE(ApplySync(cache, {.scope = "k", .checks = checks}, d).committed);
  ASSERT_FALSE(ApplySync(cache, {.scope = "k", .checks = checks}, d).committed);  // remembered
  limit.reset();
  limit.emplace(Bucket(100, "0.001"));  // same address, 99 tokens left
  const ApplyResult r = ApplySync(cache, {.scope = "k", .checks = checks}, d);
  EXPECT_TRUE(r.committed);
  EXPECT_EQ(d[0].remaining, 98);
}

TEST(DenyCache, NeverRejectsWhatTheStoreWouldAllow) {
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    std::mt19937_64 rng(seed);
    testing::FakeClock clock;
    store::MemoryStore cached_inner({.max_keys = 100, .shards = 1}, clock);
    store::MemoryStore plain({.max_keys = 100, .shards = 1}, clock);
    // Another replica takes tokens from the same store behind the cache's back.
    DenyCache cache(cached_inner, {}, clock);
    const Limit b = Bucket(1 + static_cast<int64_t>(rng() % 10), seed % 2 ? "3" : "0.5");
    const Limit daily =
        Limit::Create({.algorithm = core::Algorithm::kQuota, .ceiling = 400}).value();
    std::vector<Check> checks = {{"burst", &b, 1}, {"daily", &daily, 1}};
    std::vector<Decision> dc(2), dp(2);
    for (int step = 0; step < 600; ++step) {
      clock.Advance(Duration::Micros(static_cast<int64_t>(rng() % 700'000)));
      for (auto& c : checks) c.cost = 1 + static_cast<int64_t>(rng() % 3);
      const bool other_replica = rng() % 5 == 0;
      if (other_replica) {
        // The same request through a replica without the cache: both stores see it.
        const ApplyResult a = ApplySync(cached_inner, {.scope = "k", .checks = checks}, dc);
        const ApplyResult p = ApplySync(plain, {.scope = "k", .checks = checks}, dp);
        ASSERT_EQ(a.committed, p.committed);
        continue;
      }
      const ApplyResult c = ApplySync(cache, {.scope = "k", .checks = checks}, dc);
      const ApplyResult p = ApplySync(plain, {.scope = "k", .checks = checks}, dp);
      ASSERT_EQ(c.committed, p.committed) << "seed " << seed << " step " << step;
      if (!c.committed && !dc[0].allowed && dc[0].code == core::RejectCode::kRateLimited) {
        // Retry-After from the bound is never later than the store's.
        ASSERT_LE(dc[0].retry_after, dp[0].retry_after) << "seed " << seed << " step " << step;
      }
    }
  }
}

// Issue 31: a lease's unspent tokens go back to the bucket when it ends, on whichever replica
// held it; a bound made before then hid them until its Retry-After (about 990 s in the report).
// A bound covering a leased bucket is trusted for DenyCacheOptions::leased_bound only.
TEST(DenyCache, TokensGivenBackByALeaseAreReachableAfterTheLeasedBound) {
  testing::FakeClock clock;
  store::MemoryStore memory({.max_keys = 100, .shards = 1}, clock);
  CountingStore counting(memory);
  DenyCache cache(counting, {}, clock);
  const Limit leased = Limit::Create({.algorithm = core::Algorithm::kTokenBucket,
                                      .capacity = 5,
                                      .refill = core::Rate::Parse("0.001", 1).value(),
                                      .lease = 2})
                           .value();
  const Limit exact = Bucket(5, "0.001");
  for (const Limit* limit : {&leased, &exact}) {
    SCOPED_TRACE(limit == &leased ? "leased" : "exact");
    const std::string scope = limit == &leased ? "leased" : "exact";
    const std::vector<Check> checks = {{"burst", limit, 1}};
    const Batch batch{.scope = scope, .checks = checks};
    std::vector<Decision> d(1);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(ApplySync(cache, batch, d).committed);
    ASSERT_FALSE(ApplySync(cache, batch, d).committed);  // the store's 429, remembered
    const int before = counting.calls;
    EXPECT_FALSE(ApplySync(cache, batch, d).committed);
    EXPECT_EQ(counting.calls, before);  // answered locally, Retry-After about 1000 s
    EXPECT_GT(d[0].retry_after, Duration::Seconds(900));
    // Tokens come back behind the cache's back (another replica's lease ended; here the
    // bucket is emptied, which gives back more).
    memory.Forget(batch);
    clock.Advance(Duration::Millis(1499));
    EXPECT_FALSE(ApplySync(cache, batch, d).committed);  // within the bound: still trusted
    clock.Advance(Duration::Millis(1));
    const ApplyResult r = ApplySync(cache, batch, d);
    if (limit == &leased) {
      EXPECT_TRUE(r.committed);  // the store was asked: the tokens are reachable
      EXPECT_EQ(counting.calls, before + 1);
    } else {
      EXPECT_FALSE(r.committed);  // no lease can give tokens back: the bound holds
      EXPECT_EQ(counting.calls, before);
    }
  }
}

// Issue 31: an answer from a lease carries the store's reset (what is left besides the lease),
// so a bound made from it rejected the requests the lease itself still covered.
TEST(DenyCache, NeverHidesTheTokensOfALeaseThisReplicaHolds) {
  testing::FakeClock clock;
  store::MemoryStore memory({.max_keys = 100, .shards = 1}, clock);
  store::LeasingStore leasing(
      memory, [](const store::Unspent&) {}, {}, clock);
  DenyCache cache(leasing, {}, clock);
  const Limit leased = Limit::Create({.algorithm = core::Algorithm::kTokenBucket,
                                      .capacity = 10,
                                      .refill = core::Rate::Parse("0.001", 1).value(),
                                      .lease = 5})
                           .value();
  const std::vector<Check> checks = {{"burst", &leased, 1}};
  const Batch batch{.scope = "k", .checks = checks};
  std::vector<Decision> d(1);
  int allowed = 0;
  for (int i = 0; i < 12; ++i) allowed += ApplySync(cache, batch, d).committed ? 1 : 0;
  EXPECT_EQ(allowed, 10);                                // two leases of 5, every token spent
  EXPECT_EQ(cache.stats().local_rejections.load(), 1u);  // the 12th: the 11th's 429, remembered
}

}  // namespace
}  // namespace tollgate::engine
