#include <tollgate/store/memory_store.hpp>

#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/fake_clock.hpp"

namespace tollgate::store {
namespace {

using core::Decision;
using core::Duration;
using core::Limit;

Limit Bucket(int64_t capacity, const char* per_second) {
  return Limit::Create({.algorithm = core::Algorithm::kTokenBucket,
                        .capacity = capacity,
                        .refill = core::Rate::Parse(per_second, 1).value()})
      .value();
}

Limit DailyCeiling(int64_t ceiling) {
  return Limit::Create({.algorithm = core::Algorithm::kQuota, .ceiling = ceiling}).value();
}

class MemoryStoreTest : public ::testing::Test {
 protected:
  ApplyResult Apply(std::string_view scope, std::vector<Check> checks,
                    std::vector<Decision>& out, Mode mode = Mode::kConsume) {
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

TEST(MemoryStore, MemoryStaysBoundedWithTenTimesMaxKeys) {
  testing::FakeClock clock;
  MemoryStore store(MemoryStoreOptions{.max_keys = 1000, .shards = 4}, clock);
  const Limit b = Bucket(10, "0.001");  // refills very slowly: nothing expires on its own
  const size_t bytes = store.MemoryBytes();
  std::vector<Decision> out(1);
  for (int i = 0; i < 10'000; ++i) {
    const std::string scope = "key:" + std::to_string(i);
    const std::vector<Check> checks = {{"burst", &b, 1}};
    ASSERT_TRUE(store.ApplyNow(Batch{.scope = scope, .checks = checks}, out).committed);
    ASSERT_LE(store.size(), 1000u);
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
    store.ApplyNow(Batch{.scope = "slow:" + std::to_string(i), .checks = checks, .mode = Mode::kPeek}, out);
    ASSERT_EQ(out[0].remaining, 9);
  }
}

}  // namespace
}  // namespace tollgate::store
