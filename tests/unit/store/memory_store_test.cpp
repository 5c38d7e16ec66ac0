#include <tollgate/store/memory_store.hpp>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/fake_clock.hpp"
#include "support/limits.hpp"

namespace tollgate::store {
namespace {

using core::Decision;
using core::Duration;
using core::Limit;
using testing::Bucket;

Limit DailyCeiling(int64_t ceiling) {
  return Limit::Create({.algorithm = core::Algorithm::kQuota, .ceiling = ceiling}).value();
}

class MemoryStoreTest : public ::testing::Test {
 protected:
  ApplyResult Apply(std::string_view scope, std::vector<Check> checks, std::vector<Decision>& out,
                    Mode mode = Mode::kConsume) {
    out.assign(checks.size(), Decision{});
    return store_.ApplyNow(Batch{.scope = scope, .checks = checks, .mode = mode}, out);
  }
  bool Allowed(std::string_view scope, const Limit& limit, int64_t cost = 1) {
    std::vector<Decision> out;
    return Apply(scope, {Check{"burst", &limit, cost}}, out).committed;
  }

  testing::FakeClock clock_;
  MemoryStore store_{MemoryStoreOptions{.max_keys = 10'000, .shards = 8}, clock_};
};

TEST_F(MemoryStoreTest, KeysAreIsolated) {
  const Limit b = Bucket(3, "1");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Allowed("key:a", b));
  EXPECT_FALSE(Allowed("key:a", b));
  EXPECT_TRUE(Allowed("key:b", b));
}

TEST_F(MemoryStoreTest, QuotaRejectionLeavesTheBurstBucketUntouched) {
  const Limit burst = Bucket(10, "1");
  const Limit daily = DailyCeiling(2);
  std::vector<Decision> out;
  std::vector<Check> checks = {{"burst", &burst, 1}, {"daily", &daily, 1}};
  ASSERT_TRUE(Apply("key:a", checks, out).committed);
  ASSERT_TRUE(Apply("key:a", checks, out).committed);
  EXPECT_EQ(out[0].remaining, 8);
  for (int i = 0; i < 5; ++i) {
    const ApplyResult r = Apply("key:a", checks, out);
    EXPECT_FALSE(r.committed);
    EXPECT_TRUE(out[0].allowed);
    EXPECT_EQ(out[0].remaining, 8);  // the 429's headers: the burst as it is
    EXPECT_FALSE(out[1].allowed);
    EXPECT_EQ(out[1].code, core::RejectCode::kQuotaExceeded);
  }
  // The burst bucket still holds 8 tokens: the rejected requests consumed nothing.
  Apply("key:a", checks, out, Mode::kPeek);
  EXPECT_EQ(out[0].remaining, 8);  // nothing changes, so nothing is reported as debited
  std::vector<Check> burst_only = {{"burst", &burst, 0}};
  Apply("key:a", burst_only, out, Mode::kPeek);
  EXPECT_EQ(out[0].remaining, 8);
}

TEST_F(MemoryStoreTest, ShadowChecksReportButNeverBlock) {
  const Limit burst = Bucket(1, "1");
  const Limit roomy = Bucket(100, "1");
  std::vector<Decision> out;
  std::vector<Check> checks = {{"shadow", &burst, 1, false}, {"real", &roomy, 1, true}};
  ASSERT_TRUE(Apply("key:s", checks, out).committed);
  const ApplyResult r = Apply("key:s", checks, out);
  EXPECT_TRUE(r.committed);
  EXPECT_FALSE(out[0].allowed);
  EXPECT_EQ(out[1].remaining, 98);
}

TEST_F(MemoryStoreTest, PeekChangesNothing) {
  const Limit b = Bucket(2, "1");
  std::vector<Decision> out;
  for (int i = 0; i < 10; ++i) {
    Apply("key:p", {Check{"burst", &b, 1}}, out, Mode::kPeek);
    EXPECT_TRUE(out[0].allowed);
  }
  EXPECT_EQ(store_.size(), 0u);
  EXPECT_TRUE(Allowed("key:p", b, 2));
}

TEST_F(MemoryStoreTest, RefillFollowsTheClock) {
  const Limit b = Bucket(1, "0.5");
  ASSERT_TRUE(Allowed("key:c", b));
  std::vector<Decision> out;
  Apply("key:c", {Check{"burst", &b, 1}}, out);
  EXPECT_EQ(out[0].retry_after, Duration::Seconds(2));
  clock_.Advance(Duration::Seconds(2));
  EXPECT_TRUE(Allowed("key:c", b));
}

TEST_F(MemoryStoreTest, SlidingLogThroughTheStore) {
  const Limit log = Limit::Create({.algorithm = core::Algorithm::kSlidingWindowLog,
                                   .limit = 3,
                                   .window = Duration::Seconds(10)})
                        .value();
  const Limit daily = DailyCeiling(4);
  std::vector<Check> checks = {{"minute", &log, 1}, {"daily", &daily, 1}};
  std::vector<Decision> out;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Apply("key:l", checks, out).committed);
    EXPECT_EQ(out[0].remaining, 2 - i);
  }
  EXPECT_FALSE(Apply("key:l", checks, out).committed);
  EXPECT_EQ(out[0].retry_after, Duration::Seconds(10));
  clock_.Advance(Duration::Seconds(10));
  ASSERT_TRUE(Apply("key:l", checks, out).committed);
  // The daily ceiling (4) now rejects; the log must not record the rejected request.
  EXPECT_FALSE(Apply("key:l", checks, out).committed);
  EXPECT_TRUE(out[0].allowed);
  EXPECT_EQ(out[0].remaining, 2);
}

TEST_F(MemoryStoreTest, SweepDropsExpiredState) {
  const Limit b = Bucket(10, "10");
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(Allowed("key:" + std::to_string(i), b));
  EXPECT_EQ(store_.size(), 100u);
  clock_.Advance(Duration::Millis(500));
  EXPECT_EQ(store_.Sweep(clock_.Now()), 0u);
  clock_.Advance(Duration::Millis(600));  // every bucket is full again
  EXPECT_EQ(store_.Sweep(clock_.Now()), 100u);
  EXPECT_EQ(store_.size(), 0u);
}

TEST(MemoryStore, HammeringOneKeyFromManyThreadsAcceptsExactlyTheBudget) {
  testing::FakeClock clock;  // frozen: no refill during the test
  MemoryStore store(MemoryStoreOptions{.max_keys = 1000, .shards = 4}, clock);
  const Limit b = Bucket(10'000, "0.001");
  const Limit daily = DailyCeiling(1'000'000);
  std::atomic<int> accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      const std::vector<Check> checks = {{"burst", &b, 1}, {"daily", &daily, 1}};
      std::vector<Decision> out(2);
      for (int i = 0; i < 10'000; ++i) {
        if (store.ApplyNow(Batch{.scope = "key:hot", .checks = checks}, out).committed) {
          accepted.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(accepted.load(), 10'000);
}

TEST(MemoryStore, ManyThreadsOfNewIdentitiesAgainstAFullStoreKeepItsBoundAndItsRejections) {
  testing::FakeClock clock;  // frozen: nothing recovers
  MemoryStore store(MemoryStoreOptions{.max_keys = 256, .shards = 4}, clock);
  const Limit burst = Bucket(2, "0.001");
  const Limit daily = DailyCeiling(1000);
  const std::vector<Check> checks = {{"burst", &burst, 1}, {"daily", &daily, 1}};
  std::vector<Decision> out(2);
  for (int v = 0; v < 32; ++v) {
    const std::string scope = "victim:" + std::to_string(v);
    while (store.ApplyNow(Batch{.scope = scope, .checks = checks}, out).committed) {
    }
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<Decision> mine(2);
      for (int i = 0; i < 5'000; ++i) {
        // Every third identity exhausts its bucket: the store fills with rejecting state.
        const std::string scope = "t" + std::to_string(t) + ":" + std::to_string(i);
        const int64_t cost = i % 3 == 0 ? 2 : 1;
        const std::vector<Check> c = {{"burst", &burst, cost}, {"daily", &daily, cost}};
        (void)store.ApplyNow(Batch{.scope = scope, .checks = c}, mine);
        ASSERT_LE(store.size(), 256u);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(store.size(), 256u);
  EXPECT_GT(store.stats().full_rejections.load(), 0u);
  for (int v = 0; v < 32; ++v) {
    EXPECT_FALSE(
        store.ApplyNow(Batch{.scope = "victim:" + std::to_string(v), .checks = checks}, out)
            .committed);
  }
}

TEST(MemoryStore, MemoryStaysBoundedWithTenTimesMaxKeys) {
  testing::FakeClock clock;
  MemoryStore store(MemoryStoreOptions{.max_keys = 1000, .shards = 4}, clock);
  const Limit b = Bucket(10, "0.001");  // refills very slowly: nothing expires on its own
  std::vector<Decision> out(1);
  size_t bytes = 0;
  for (int i = 0; i < 10'000; ++i) {
    const std::string scope = "key:" + std::to_string(i);
    const std::vector<Check> checks = {{"burst", &b, 1}};
    ASSERT_TRUE(store.ApplyNow(Batch{.scope = scope, .checks = checks}, out).committed);
    ASSERT_LE(store.size(), 1000u);
    if (i == 999) bytes = store.MemoryBytes();  // the table, and one limit per shard
  }
  EXPECT_EQ(store.MemoryBytes(), bytes);
  EXPECT_GE(store.stats().evicted_live.load(), 9'000u);
  EXPECT_LE(bytes / 1000, 64u);  // bytes per key at the configured maximum
}

TEST(MemoryStore, FullyRefilledStateIsEvictedBeforeLiveState) {
  testing::FakeClock clock;
  MemoryStore store(MemoryStoreOptions{.max_keys = 100, .shards = 1}, clock);
  const Limit fast = Bucket(1, "1");       // full again after 1 s
  const Limit slow = Bucket(10, "0.001");  // live for hours
  std::vector<Decision> out(1);
  auto use = [&](const std::string& scope, const Limit& l) {
    const std::vector<Check> checks = {{"burst", &l, 1}};
    return store.ApplyNow(Batch{.scope = scope, .checks = checks}, out).committed;
  };
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(use("slow:" + std::to_string(i), slow));
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(use("fast:" + std::to_string(i), fast));
  clock.Advance(Duration::Seconds(2));  // every "fast" bucket is full: no information left
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(use("new:" + std::to_string(i), slow));
  EXPECT_EQ(store.stats().evicted_live.load(), 0u);
  EXPECT_EQ(store.stats().expired.load(), 50u);
  // The slow keys kept their state.
  for (int i = 0; i < 50; ++i) {
    const std::vector<Check> checks = {{"burst", &slow, 0}};
    store.ApplyNow(
        Batch{.scope = "slow:" + std::to_string(i), .checks = checks, .mode = Mode::kPeek}, out);
    ASSERT_EQ(out[0].remaining, 9);
  }
}

// The clients of a plan, each its own identity, against one MemoryStore at an explicit `now`.
class Clients {
 public:
  Clients(MemoryStoreOptions options, std::vector<Check> plan)
      : store_(options, clock_), plan_(std::move(plan)), out_(plan_.size()) {}

  // One request of `cost` on every check of the plan.
  bool Request(const std::string& scope, int64_t cost = 1) {
    std::vector<Check> checks = plan_;
    for (Check& c : checks) c.cost = cost;
    last_ = store_.ApplyNow(Batch{.scope = scope, .checks = checks, .now = now_}, out_);
    return last_.committed;
  }
  // Requests until one is rejected; the number that passed.
  int Exhaust(const std::string& scope) {
    int passed = 0;
    while (Request(scope)) ++passed;
    return passed;
  }

  MemoryStore& store() { return store_; }
  const MemoryStoreStats& stats() const { return store_.stats(); }
  const std::vector<Decision>& decisions() const { return out_; }
  core::Instant now_ = core::Instant::FromUnixSeconds(1'790'000'000);

 private:
  testing::FakeClock clock_;  // unused: every batch carries now_
  MemoryStore store_;
  std::vector<Check> plan_;
  std::vector<Decision> out_;
  ApplyResult last_;
};

// The attack: a client exhausts its bucket, then makes new identities (new keys, new addresses)
// to fill the store, so that the store evicts its exhausted bucket and so resets its limit. Its
// bucket and the new ones are full again within the same second, so "nearest to expiry" could
// not tell them apart.
TEST(MemoryStore, NewIdentitiesCannotEvictAnExhaustedBucket) {
  const Limit burst = Bucket(5, "10");
  const Limit daily = DailyCeiling(1000);
  Clients clients(MemoryStoreOptions{.max_keys = 32, .shards = 1},
                  {{"burst", &burst, 1}, {"daily", &daily, 1}});
  ASSERT_EQ(clients.Exhaust("key:attacker"), 5);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(clients.Request("key:new-" + std::to_string(i))) << i;
    ASSERT_FALSE(clients.Request("key:attacker")) << "after " << i << " new identities";
    ASSERT_EQ(clients.decisions()[0].code, core::RejectCode::kRateLimited);
  }
  EXPECT_GE(clients.stats().evicted_live.load(), 900u);  // the new identities replaced each other
  EXPECT_EQ(clients.stats().full_rejections.load(), 0u);
  EXPECT_LE(clients.store().size(), 32u);
}

TEST(MemoryStore, AShardFullOfRejectingStateRejectsANewIdentityAndStoresNothing) {
  const Limit burst = Bucket(2, "0.1");  // a token per 10 s
  Clients clients(MemoryStoreOptions{.max_keys = 16, .shards = 1}, {{"burst", &burst, 1}});
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(clients.Request("key:" + std::to_string(i), 2));
  clients.now_ = clients.now_ + Duration::Seconds(3);

  EXPECT_FALSE(clients.Request("key:new"));
  const Decision& d = clients.decisions()[0];
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.code, core::RejectCode::kRateLimited);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_EQ(d.limit, 2);
  // The soonest an entry stops rejecting and may be evicted: its next token, 7 s away.
  EXPECT_EQ(d.retry_after, Duration::Seconds(7));
  EXPECT_EQ(clients.stats().full_rejections.load(), 1u);
  EXPECT_EQ(clients.stats().evicted_live.load(), 0u);
  EXPECT_EQ(clients.store().size(), 16u);
  // Known identities are unaffected: their keys need no room.
  EXPECT_FALSE(clients.Request("key:3"));
  EXPECT_EQ(clients.decisions()[0].retry_after, Duration::Seconds(7));
  EXPECT_EQ(clients.stats().full_rejections.load(), 1u);

  // After the Retry-After, the entries hold a token again: the least restrictive one goes.
  clients.now_ = clients.now_ + Duration::Seconds(7);
  EXPECT_TRUE(clients.Request("key:new"));
  EXPECT_EQ(clients.stats().evicted_live.load(), 1u);
  EXPECT_EQ(clients.stats().full_rejections.load(), 1u);
  EXPECT_EQ(clients.store().size(), 16u);
}

TEST(MemoryStore, ARejectedNewIdentityChangesNoneOfItsBatch) {
  const Limit burst = Bucket(1, "0.001");
  const Limit daily = DailyCeiling(1000);
  Clients full(MemoryStoreOptions{.max_keys = 16, .shards = 1}, {{"burst", &burst, 1}});
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(full.Request("key:" + std::to_string(i)));
  // The same shard, a batch with a key that exists ("burst" of key:0) and one that does not.
  std::vector<Decision> out(2);
  const std::vector<Check> checks = {{"daily", &daily, 1}, {"burst", &burst, 1}};
  const ApplyResult r =
      full.store().ApplyNow(Batch{.scope = "key:0", .checks = checks, .now = full.now_}, out);
  EXPECT_FALSE(r.committed);  // the burst rejects anyway
  EXPECT_EQ(full.stats().full_rejections.load(), 0u);

  const Limit roomy = Bucket(10, "0.001");
  Clients mixed(MemoryStoreOptions{.max_keys = 16, .shards = 1}, {{"burst", &burst, 1}});
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(mixed.Request("key:" + std::to_string(i)));
  const std::vector<Check> two = {{"roomy", &roomy, 1}, {"daily", &daily, 1}};
  // key:0's "roomy" and "daily" are both new: no room, so neither is stored.
  EXPECT_FALSE(mixed.store()
                   .ApplyNow(Batch{.scope = "key:0", .checks = two, .now = mixed.now_}, out)
                   .committed);
  EXPECT_FALSE(out[0].allowed);
  EXPECT_FALSE(out[1].allowed);
  EXPECT_EQ(mixed.stats().full_rejections.load(), 1u);
  EXPECT_EQ(mixed.store().size(), 16u);
}

TEST(MemoryStore, ShadowChecksNeverCauseAFullRejection) {
  const Limit burst = Bucket(1, "0.001");
  Clients clients(MemoryStoreOptions{.max_keys = 16, .shards = 1}, {{"burst", &burst, 1}});
  for (int i = 0; i < 15; ++i) ASSERT_TRUE(clients.Request("key:" + std::to_string(i)));
  // One slot left: the enforced check's new key takes it, the shadow one is not stored.
  std::vector<Decision> out(2);
  const std::vector<Check> checks = {{"shadow", &burst, 1, false}, {"burst", &burst, 1, true}};
  EXPECT_TRUE(clients.store()
                  .ApplyNow(Batch{.scope = "key:new", .checks = checks, .now = clients.now_}, out)
                  .committed);
  EXPECT_EQ(clients.store().size(), 16u);
  EXPECT_EQ(clients.stats().full_rejections.load(), 0u);
  const std::vector<Check> shadow_only = {{"shadow", &burst, 1, false}};
  EXPECT_TRUE(
      clients.store()
          .ApplyNow(Batch{.scope = "key:other", .checks = shadow_only, .now = clients.now_}, out)
          .committed);
  EXPECT_EQ(clients.stats().full_rejections.load(), 0u);
  EXPECT_EQ(clients.store().size(), 16u);
}

// One limit of 20 per algorithm, none of them recovering within a test.
std::vector<Limit> EveryAlgorithm(int64_t limit) {
  const Duration hour = Duration::Seconds(3600);
  return {
      Bucket(limit, "0.001"),
      Limit::Create(
          {.algorithm = core::Algorithm::kSlidingWindowLog, .limit = limit, .window = hour})
          .value(),
      Limit::Create(
          {.algorithm = core::Algorithm::kSlidingWindowCounter, .limit = limit, .window = hour})
          .value(),
      Limit::Create({.algorithm = core::Algorithm::kFixedWindow, .limit = limit, .window = hour})
          .value(),
      DailyCeiling(limit),
  };
}

// Midday of the FakeClock's default day: a daily quota does not roll over within a test.
constexpr core::Instant kMidday =
    core::Instant::FromUnixSeconds(1'790'000'000 / 86'400 * 86'400 + 43'200);

TEST(MemoryStore, TheLeastRestrictiveEntryIsEvictedFirst) {
  for (const Limit& limit : EveryAlgorithm(20)) {
    SCOPED_TRACE(core::AlgorithmName(limit.algorithm()));
    Clients clients(MemoryStoreOptions{.max_keys = 16, .shards = 1}, {{"limit", &limit, 1}});
    clients.now_ = kMidday;
    // key:i has used i + 2 of 20: key:0 the least, key:15 17 of 20.
    for (int i = 0; i < 16; ++i) {
      ASSERT_TRUE(clients.Request("key:" + std::to_string(i), i + 2));
    }
    ASSERT_TRUE(clients.Request("key:new"));
    // key:0 was evicted (as good as new again), the others kept their state.
    std::vector<Decision> out(1);
    for (int i = 0; i < 16; ++i) {
      const std::vector<Check> peek = {{"limit", &limit, 0}};
      clients.store().ApplyNow(Batch{.scope = "key:" + std::to_string(i),
                                     .checks = peek,
                                     .mode = Mode::kPeek,
                                     .now = clients.now_},
                               out);
      EXPECT_EQ(out[0].remaining, i == 0 ? 20 : 18 - i) << i;
    }
    EXPECT_EQ(clients.stats().evicted_live.load(), 1u);
  }
}

TEST(MemoryStore, ExpiredStateIsDroppedBeforeRestrictiveStateBetweenSweeps) {
  const Limit fast = Bucket(1, "1");      // full again after 1 s
  const Limit slow = Bucket(1, "0.001");  // exhausted for 1000 s
  testing::FakeClock clock;
  MemoryStore store(MemoryStoreOptions{.max_keys = 16, .shards = 1}, clock);
  std::vector<Decision> out(1);
  auto use = [&](const std::string& scope, const Limit& l) {
    const std::vector<Check> checks = {{"burst", &l, 1}};
    return store.ApplyNow(Batch{.scope = scope, .checks = checks}, out).committed;
  };
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(use("slow:" + std::to_string(i), slow));
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(use("fast:" + std::to_string(i), fast));
  clock.Advance(Duration::Millis(500));
  // Full and every entry rejects: this sweeps (nothing has expired yet) and refuses.
  EXPECT_FALSE(use("new:a", slow));
  EXPECT_EQ(store.stats().full_rejections.load(), 1u);
  EXPECT_EQ(out[0].retry_after, Duration::Millis(500));  // the fast buckets' next token
  // 700 ms later the fast buckets have expired; no sweep is due yet, so eviction finds them.
  clock.Advance(Duration::Millis(700));
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(use("new:" + std::to_string(i), slow)) << i;
  EXPECT_EQ(store.stats().expired.load(), 8u);
  EXPECT_EQ(store.stats().evicted_live.load(), 0u);
  // Now only exhausted state is left.
  EXPECT_FALSE(use("new:z", slow));
  EXPECT_EQ(store.stats().full_rejections.load(), 2u);
  for (int i = 0; i < 8; ++i) EXPECT_FALSE(use("slow:" + std::to_string(i), slow));
}

// A sweep that makes room may drop a key of the very batch it makes room for (it had expired):
// that key is then new too, and needs room like the others.
TEST(MemoryStore, ABatchWhoseOwnKeyExpiredNeedsRoomForItToo) {
  const Limit fast = Bucket(1, "1");      // full again after 1 s
  const Limit slow = Bucket(1, "0.001");  // exhausted for 1000 s
  const Limit roomy = Bucket(10, "0.001");
  const Limit daily = DailyCeiling(1000);
  for (const bool one_evictable : {false, true}) {
    SCOPED_TRACE(one_evictable);
    testing::FakeClock clock;
    MemoryStore store(MemoryStoreOptions{.max_keys = 16, .shards = 1}, clock);
    std::vector<Decision> out(2);
    auto apply = [&](const std::string& scope, std::vector<Check> checks) {
      return store.ApplyNow(Batch{.scope = scope, .checks = checks}, out).committed;
    };
    ASSERT_TRUE(apply("key:0", {{"burst", &fast, 1}}));
    for (int i = 1; i < 16; ++i) {
      const Limit& l = one_evictable && i == 1 ? roomy : slow;
      ASSERT_TRUE(apply("key:" + std::to_string(i), {{"burst", &l, 1}}));
    }
    clock.Advance(Duration::Seconds(2));  // key:0's bucket has expired
    const bool committed = apply("key:0", {{"burst", &fast, 1}, {"daily", &daily, 1}});
    EXPECT_EQ(committed, one_evictable);
    EXPECT_EQ(store.stats().full_rejections.load(), one_evictable ? 0u : 1u);
    EXPECT_EQ(store.stats().expired.load(), 1u);
    EXPECT_EQ(store.size(), one_evictable ? 16u : 15u);
  }
}

// Every algorithm, random traffic: victims exhaust their limit, then many more identities than
// the store holds come and go, some of them exhausting theirs too. Against an unbounded store
// fed the same batches: the victims are rejected throughout, and the bounded store rejects a
// batch that the unbounded one admits only as a full rejection, counted.
TEST(MemoryStore, RestrictiveStateOfEveryAlgorithmSurvivesEviction) {
  for (const Limit& limit : EveryAlgorithm(4)) {
    SCOPED_TRACE(core::AlgorithmName(limit.algorithm()));
    std::mt19937_64 rng(7);
    Clients bounded(MemoryStoreOptions{.max_keys = 48, .shards = 1}, {{"limit", &limit, 1}});
    Clients unbounded(MemoryStoreOptions{.max_keys = 100'000, .shards = 1}, {{"limit", &limit, 1}});
    bounded.now_ = unbounded.now_ = kMidday;
    for (int v = 0; v < 8; ++v) {
      ASSERT_EQ(bounded.Exhaust("victim:" + std::to_string(v)), 4);
      ASSERT_EQ(unbounded.Exhaust("victim:" + std::to_string(v)), 4);
    }
    for (int step = 0; step < 4000; ++step) {
      const uint64_t dice = rng() % 100;
      std::string scope;
      int64_t cost = 1;
      if (dice < 10) {
        scope = "victim:" + std::to_string(rng() % 8);
      } else if (dice < 15) {
        scope = "hog:" + std::to_string(rng() % 1000);  // exhausts its limit at once
        cost = 4;
      } else {
        scope = "new:" + std::to_string(rng() % 5000);
        cost = static_cast<int64_t>(1 + rng() % 2);
      }
      const uint64_t full_before = bounded.stats().full_rejections.load();
      const bool b = bounded.Request(scope, cost);
      const bool u = unbounded.Request(scope, cost);
      const bool full = bounded.stats().full_rejections.load() != full_before;
      if (scope.starts_with("victim:")) {
        ASSERT_FALSE(b) << "step " << step;
        ASSERT_FALSE(u);
        ASSERT_FALSE(full);
      }
      if (u && !b) {
        ASSERT_TRUE(full) << "step " << step << " " << scope;
      }
      if (full) {
        ASSERT_FALSE(b);
      }
      ASSERT_LE(bounded.store().size(), 48u);
      const auto dt = Duration::Millis(static_cast<int64_t>(rng() % 50));
      bounded.now_ = bounded.now_ + dt;
      unbounded.now_ = unbounded.now_ + dt;
    }
    EXPECT_GT(bounded.stats().evicted_live.load(), 100u);
    EXPECT_GT(bounded.stats().full_rejections.load(), 0u);
  }
}

}  // namespace
}  // namespace tollgate::store
