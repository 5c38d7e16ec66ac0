// Token leasing over a shared store: fewer store calls, and the published bound (at most
// replicas x N beyond the exact budget in any interval) on two simulated replicas.
#include <tollgate/store/leasing_store.hpp>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <optional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <tollgate/core/limit.hpp>
#include <tollgate/core/rate.hpp>
#include <tollgate/store/memory_store.hpp>
#include "support/fake_clock.hpp"
#include "support/faulty_store.hpp"

namespace tollgate::store {
namespace {

using core::Decision;
using core::Duration;

core::Limit LeasedBucket(int64_t capacity, const char* refill_per_second, int64_t lease) {
  return core::Limit::Create({.algorithm = core::Algorithm::kTokenBucket,
                              .capacity = capacity,
                              .refill = core::Rate::Parse(refill_per_second, 1).value(),
                              .lease = lease})
      .value();
}

// One replica: its leases over the shared store, counting the store calls it makes.
struct Replica {
  Replica(Store& shared, testing::FakeClock& clock, Duration ttl = Duration::Seconds(1))
      : calls(shared),
        leasing(
            calls, [this](const Unspent& u) { given_back.push_back(u); },
            LeasingStore::Options{.ttl = ttl}, clock) {}

  std::optional<Decision> Send(const core::Limit& limit, int64_t cost = 1,
                               std::string_view scope = "key:hot") {
    const Check check{.name = "burst", .limit = &limit, .cost = cost};
    Decision d;
    std::optional<ApplyResult> out;
    leasing.Apply({.scope = scope, .checks = {&check, 1}}, {&d, 1},
                  [&](ApplyResult&& r) { out = std::move(r); });
    EXPECT_TRUE(out.has_value());
    if (!out || out->error != StoreErrc::kOk) return std::nullopt;
    return d;
  }

  testing::FaultyStore calls;  // forwards everything; counts the calls
  LeasingStore leasing;
  std::vector<Unspent> given_back;
};

class LeasingStoreTest : public ::testing::Test {
 protected:
  testing::FakeClock clock_;
  MemoryStore shared_{MemoryStoreOptions{.max_keys = 1000, .shards = 1}, clock_};
};

TEST_F(LeasingStoreTest, AHotKeyCostsOneStoreCallPerLease) {
  const core::Limit limit = LeasedBucket(1000, "1", 50);
  Replica r(shared_, clock_);
  for (int i = 0; i < 500; ++i) {
    const auto d = r.Send(limit);
    ASSERT_TRUE(d && d->allowed) << i;
    EXPECT_EQ(d->limit, 1000);
    // What this replica knows is left: the store's count after the grant plus its lease.
    EXPECT_EQ(d->remaining, 1000 - 1 - i) << i;
  }
  EXPECT_EQ(r.calls.calls(), 10u);  // 500 / 50
  EXPECT_EQ(r.leasing.stats().local.load(), 490u);
  EXPECT_EQ(r.leasing.stats().grants.load(), 10u);
}

TEST_F(LeasingStoreTest, UnleasedLimitsPeeksAndBatchesGoToTheStoreAsTheyAre) {
  const core::Limit exact = LeasedBucket(100, "1", 0);
  const core::Limit leased = LeasedBucket(100, "1", 10);
  Replica r(shared_, clock_);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(r.Send(exact)->allowed);
  EXPECT_EQ(r.calls.calls(), 5u);
  ASSERT_TRUE(r.Send(leased, 11)->allowed);  // above the lease
  EXPECT_EQ(r.calls.calls(), 6u);
  const Check both[] = {{.name = "a", .limit = &leased}, {.name = "b", .limit = &leased}};
  Decision ds[2];
  r.leasing.Apply({.scope = "key:x", .checks = both}, ds, [](ApplyResult&&) {});
  r.leasing.Apply({.scope = "key:x", .checks = {both, 1}, .mode = Mode::kPeek}, ds,
                  [](ApplyResult&&) {});
  EXPECT_EQ(r.calls.calls(), 8u);
  EXPECT_EQ(r.leasing.stats().grants.load(), 0u);
}

TEST_F(LeasingStoreTest, NearTheEndItFallsBackToExactAndRejectsHonestly) {
  const core::Limit limit = LeasedBucket(25, "0.001", 10);
  Replica r(shared_, clock_);
  int allowed = 0;
  std::optional<Decision> last;
  for (int i = 0; i < 40; ++i) {
    last = r.Send(limit);
    ASSERT_TRUE(last);
    if (last->allowed) ++allowed;
  }
  EXPECT_EQ(allowed, 25);  // two leases of 10, then 5 exact: nothing lost, nothing extra
  EXPECT_FALSE(last->allowed);
  EXPECT_GT(last->retry_after, Duration());
  EXPECT_EQ(last->code, core::RejectCode::kRateLimited);
  EXPECT_GE(r.leasing.stats().refused.load(), 1u);
}

TEST_F(LeasingStoreTest, UnspentTokensGoBackWhenTheLeaseExpires) {
  const core::Limit limit = LeasedBucket(100, "0.001", 20);
  Replica r(shared_, clock_, Duration::Millis(500));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(r.Send(limit)->allowed);
  r.leasing.Sweep();
  EXPECT_TRUE(r.given_back.empty());  // not expired yet
  clock_.Advance(Duration::Millis(500));
  r.leasing.Sweep();
  ASSERT_EQ(r.given_back.size(), 1u);
  EXPECT_EQ(r.given_back[0].tokens, 17);
  EXPECT_EQ(r.given_back[0].scope, "key:hot");
  EXPECT_EQ(r.given_back[0].name, "burst");
  EXPECT_EQ(r.leasing.stats().given_back.load(), 17u);
  r.leasing.Sweep();
  EXPECT_EQ(r.given_back.size(), 1u);  // once
}

TEST_F(LeasingStoreTest, AStoreFailureIsTheCallersToHandle) {
  const core::Limit limit = LeasedBucket(100, "1", 10);
  Replica r(shared_, clock_);
  r.calls.FailAll(StoreErrc::kUnavailable);
  EXPECT_FALSE(r.Send(limit));
  r.calls.FailAll(std::nullopt);
  EXPECT_TRUE(r.Send(limit)->allowed);  // no grant left pending
}

// Admitted requests per millisecond on two replicas under bursty random traffic, and the most
// admitted in any window of `window_ms`.
struct HammerRun {
  int64_t total = 0, worst = 0, requests = 0;
  uint64_t calls = 0;
};
HammerRun Hammer(Store& shared, testing::FakeClock& clock, const core::Limit& limit,
                 int64_t window_ms, int64_t ms_total) {
  Replica a(shared, clock, Duration::Millis(300)), b(shared, clock, Duration::Millis(300));
  std::mt19937 random(7);
  std::deque<std::pair<int64_t, int64_t>> recent;  // (ms, admitted in that ms)
  HammerRun run;
  int64_t window = 0;
  for (int64_t ms = 0; ms < ms_total; ++ms) {
    int64_t now = 0;
    // Phases of 0-400 ms: a replica idles, trickles (one request now and then) or hammers.
    for (Replica* r : {&a, &b}) {
      const int phase = static_cast<int>((ms / 400 + (r == &b ? 1 : 0)) * 2654435761u % 3);
      const int n = phase == 0 ? 0 : phase == 1 ? (random() % 8 == 0 ? 1 : 0) : 4;
      for (int i = 0; i < n; ++i) {
        ++run.requests;
        if (r->Send(limit)->allowed) ++now;
      }
    }
    recent.emplace_back(ms, now);
    window += now;
    run.total += now;
    while (recent.front().first <= ms - window_ms) {
      window -= recent.front().second;
      recent.pop_front();
    }
    run.worst = std::max(run.worst, window);
    clock.Advance(Duration::Millis(1));
    if (ms % 100 == 0) {
      a.leasing.Sweep();
      b.leasing.Sweep();
    }
  }
  run.calls = a.calls.calls() + b.calls.calls();
  return run;
}

// The bound: in every window the admitted requests stay within the exact budget (capacity +
// refill x window) plus replicas x N. The same traffic without leases stays within the exact
// budget (which checks the test's arithmetic).
TEST_F(LeasingStoreTest, TwoReplicasStayWithinReplicasTimesNOfTheExactBudget) {
  constexpr int64_t kCapacity = 100, kLease = 25, kSeconds = 20;
  const core::Limit leased = LeasedBucket(kCapacity, "1000", kLease);
  const core::Limit exact = LeasedBucket(kCapacity, "1000", 0);
  for (const int64_t window_ms : {1, 10, 100, 1000}) {
    const int64_t budget = kCapacity + window_ms;  // refill: 1 per ms
    const HammerRun with = Hammer(shared_, clock_, leased, window_ms, kSeconds * 1000);
    clock_.Advance(Duration::Seconds(10));
    const HammerRun without = Hammer(shared_, clock_, exact, window_ms, kSeconds * 1000);
    clock_.Advance(Duration::Seconds(10));
    std::printf(
        "window %lld ms: exact budget %lld; leases: most %lld (bound %lld), %lld of %lld "
        "admitted, %llu store calls; without: most %lld, %lld admitted, %llu calls\n",
        static_cast<long long>(window_ms), static_cast<long long>(budget),
        static_cast<long long>(with.worst), static_cast<long long>(budget + 2 * kLease),
        static_cast<long long>(with.total), static_cast<long long>(with.requests),
        static_cast<unsigned long long>(with.calls), static_cast<long long>(without.worst),
        static_cast<long long>(without.total), static_cast<unsigned long long>(without.calls));
    EXPECT_LE(without.worst, budget) << window_ms;
    EXPECT_LE(with.worst, budget + 2 * kLease) << window_ms;
    EXPECT_GT(with.worst, 0);
    // Leases lose nothing for long: over the run, at least 90 % of what exact admitted.
    EXPECT_GE(with.total * 10, without.total * 9) << window_ms;
  }
}

// A hot key within its limit on two replicas: at least 10x fewer store calls than requests.
TEST_F(LeasingStoreTest, AHotKeyOnTwoReplicasCostsTheStoreAtLeastTenTimesFewerCalls) {
  const core::Limit limit = LeasedBucket(1'000'000, "100000", 100);
  Replica a(shared_, clock_), b(shared_, clock_);
  int64_t allowed = 0;
  for (int ms = 0; ms < 1000; ++ms) {  // 20,000 requests/s, 10 per replica per ms
    for (int i = 0; i < 10; ++i) {
      allowed += a.Send(limit)->allowed ? 1 : 0;
      allowed += b.Send(limit)->allowed ? 1 : 0;
    }
    clock_.Advance(Duration::Millis(1));
  }
  EXPECT_EQ(allowed, 20'000);
  EXPECT_LE((a.calls.calls() + b.calls.calls()) * 10, 20'000u);
}

}  // namespace
}  // namespace tollgate::store
