// FailMode::kLocal: while the store fails, each replica decides on its own memory store with
// 1/replicas of every limit; the bound it promises is checked on two simulated replicas.
#include <tollgate/engine/engine.hpp>

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include <tollgate/store/memory_store.hpp>
#include "support/fake_clock.hpp"
#include "support/faulty_store.hpp"
#include "support/limits.hpp"

namespace tollgate::engine {
namespace {

using core::Decision;
using core::Duration;
using core::Limit;
using store::Check;
using store::StoreErrc;
using testing::Bucket;

Limit Window(int64_t limit, int64_t seconds) {
  return Limit::Create({.algorithm = core::Algorithm::kFixedWindow,
                        .limit = limit,
                        .window = Duration::Seconds(seconds)})
      .value();
}

Limit DailyCeiling(int64_t ceiling) {
  return Limit::Create({.algorithm = core::Algorithm::kQuota,
                        .period = core::Period::kDay,
                        .ceiling = ceiling})
      .value();
}

// One replica: its shared store (which can fail) and its own local store.
struct Replica {
  Replica(store::Store& shared, testing::FakeClock& clock, int replicas)
      : faulty(shared),
        local(store::MemoryStoreOptions{.max_keys = 100, .shards = 1}, clock),
        engine(faulty) {
    engine.SetLocal(local, [replicas] { return replicas; });
  }

  Verdict Decide(const std::vector<Check>& checks, FailMode mode = FailMode::kLocal) {
    decisions.assign(checks.size(), Decision{});
    std::optional<Verdict> out;
    engine.Decide({.batch = {.scope = "key:k", .checks = checks}, .fail_mode = mode}, decisions,
                  [&](Verdict v) { out = v; });
    EXPECT_TRUE(out.has_value());
    return out.value_or(Verdict{});
  }

  // Requests of `cost` until the first rejection, at most `most`: how many were allowed.
  int Drain(const std::vector<Check>& checks, int most = 1000) {
    int allowed = 0;
    while (allowed < most && Decide(checks).allowed()) ++allowed;
    return allowed;
  }

  testing::FaultyStore faulty;
  store::MemoryStore local;
  Engine engine;
  std::vector<Decision> decisions;
};

class LocalFallbackTest : public ::testing::Test {
 protected:
  testing::FakeClock clock_;
  store::MemoryStore shared_{store::MemoryStoreOptions{.max_keys = 100, .shards = 1}, clock_};
};

TEST_F(LocalFallbackTest, EachReplicaAdmitsItsShareOfEveryAlgorithm) {
  const Limit bucket = Bucket(10, "1");
  const Limit window = Window(9, 60);
  const Limit ceiling = DailyCeiling(7);
  struct Case {
    const Limit* limit;
    int replicas;
    int share;  // floor(limit / replicas)
  };
  const std::array<Case, 6> cases{{{&bucket, 2, 5},
                                   {&bucket, 3, 3},
                                   {&window, 2, 4},
                                   {&window, 1, 9},
                                   {&ceiling, 2, 3},
                                   {&ceiling, 4, 1}}};
  for (const Case& c : cases) {
    Replica r(shared_, clock_, c.replicas);
    r.faulty.FailAll(StoreErrc::kUnavailable);
    const std::vector<Check> checks = {{"limit", c.limit, 1}};
    EXPECT_EQ(r.Drain(checks), c.share) << c.replicas;
    const Verdict v = r.Decide(checks);
    EXPECT_EQ(v.kind, Verdict::Kind::kRejected);
    EXPECT_TRUE(v.local);
    EXPECT_EQ(v.store_error, StoreErrc::kUnavailable);
    EXPECT_GT(v.retry_after, Duration());
    // Reported in the replica's share: the limit divided, nothing remaining.
    EXPECT_EQ(r.decisions[0].limit, c.limit->PolicyQuota() / c.replicas);
    EXPECT_EQ(r.decisions[0].remaining, 0);
    EXPECT_EQ(r.engine.stats().local_allowed.load(), static_cast<uint64_t>(c.share));
    EXPECT_EQ(r.engine.stats().local_rejected.load(), 2u);
    clock_.Advance(Duration::Seconds(86'400));
  }
}

// A cost from a client's query (`?pages=9223372036854775807`) times the replicas must not wrap
// to a negative cost, which would pass and credit the bucket.
TEST_F(LocalFallbackTest, AHugeCostSaturatesAndCanNeverPass) {
  const Limit bucket = Bucket(10, "1");
  const Limit ceiling = DailyCeiling(10);
  Replica r(shared_, clock_, 3);
  r.faulty.FailAll(StoreErrc::kUnavailable);
  for (const int64_t cost :
       {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() / 2,
        std::numeric_limits<int64_t>::max() / 3 + 1, int64_t{1} << 62}) {
    for (const Limit* limit : {&bucket, &ceiling}) {
      const Verdict v = r.Decide({{"limit", limit, cost}});
      EXPECT_EQ(v.kind, Verdict::Kind::kRejected) << cost;
      EXPECT_TRUE(v.local);
    }
  }
  EXPECT_EQ(r.Drain({{"limit", &bucket, 1}}), 3);  // nothing was credited: 10 / 3
}

TEST_F(LocalFallbackTest, TheStoreDecidesAgainWhenItAnswersAndItsStateIsUntouched) {
  const Limit bucket = Bucket(4, "0.001");
  const std::vector<Check> checks = {{"burst", &bucket, 1}};
  Replica r(shared_, clock_, 2);
  EXPECT_EQ(r.Decide(checks).kind, Verdict::Kind::kAllowed);  // the store: 3 left
  r.faulty.FailAll(StoreErrc::kTimeout);
  EXPECT_EQ(r.Drain(checks), 2);  // the local share: 4 / 2
  r.faulty.FailAll(std::nullopt);
  const Verdict back = r.Decide(checks);
  EXPECT_EQ(back.kind, Verdict::Kind::kAllowed);
  EXPECT_FALSE(back.local);
  EXPECT_EQ(r.decisions[0].remaining, 2);  // the store's count went on from 3
  EXPECT_EQ(r.Drain(checks), 2);
}

TEST_F(LocalFallbackTest, WithoutALocalStoreItFailsOpen) {
  const Limit bucket = Bucket(1, "0.001");
  testing::FaultyStore faulty(shared_);
  Engine engine(faulty);
  faulty.FailAll(StoreErrc::kUnavailable);
  std::vector<Decision> decisions(1);
  const std::vector<Check> checks = {{"burst", &bucket, 1}};
  for (int i = 0; i < 3; ++i) {
    std::optional<Verdict> out;
    engine.Decide({.batch = {.scope = "key:k", .checks = checks}, .fail_mode = FailMode::kLocal},
                  decisions, [&](Verdict v) { out = v; });
    ASSERT_TRUE(out);
    EXPECT_EQ(out->kind, Verdict::Kind::kDegraded);
  }
}

TEST_F(LocalFallbackTest, OpenAndClosedRoutesDoNotUseTheLocalStore) {
  const Limit bucket = Bucket(2, "0.001");
  const std::vector<Check> checks = {{"burst", &bucket, 1}};
  Replica r(shared_, clock_, 1);
  r.faulty.FailAll(StoreErrc::kUnavailable);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(r.Decide(checks, FailMode::kOpen).kind, Verdict::Kind::kDegraded);
  EXPECT_EQ(r.Decide(checks, FailMode::kClosed).kind, Verdict::Kind::kUnavailable);
  EXPECT_EQ(r.Drain(checks), 2);  // the local store was not spent by the others
}

// The published bound: during an outage of T seconds the replicas together admit at most what
// the limit admits from fresh in T (capacity + refill x T), each its 1/replicas share.
TEST_F(LocalFallbackTest, TwoReplicasTogetherStayWithinOneBudgetOverAnOutage) {
  const Limit bucket = Bucket(100, "10");
  const std::vector<Check> checks = {{"burst", &bucket, 1}};
  Replica a(shared_, clock_, 2), b(shared_, clock_, 2);
  a.faulty.FailAll(StoreErrc::kUnavailable);
  b.faulty.FailAll(StoreErrc::kUnavailable);
  int admitted = 0;
  const int kSeconds = 10, kStepsPerSecond = 20;
  for (int step = 0; step <= kSeconds * kStepsPerSecond; ++step) {
    admitted += a.Drain(checks) + b.Drain(checks);  // both hammer the key all the time
    clock_.Advance(Duration::Millis(1000 / kStepsPerSecond));
  }
  const int bound = 100 + 10 * kSeconds;
  EXPECT_LE(admitted, bound);
  EXPECT_GE(admitted, bound - 2 * 2);  // the share is used, up to rounding on each replica
}

}  // namespace
}  // namespace tollgate::engine
