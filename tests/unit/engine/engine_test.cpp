#include <tollgate/engine/engine.hpp>

#include <optional>
#include <string>
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

class EngineTest : public ::testing::Test {
 protected:
  Verdict Decide(const std::vector<Check>& checks, FailMode mode = FailMode::kOpen,
                 std::string_view scope = "key:k") {
    decisions_.assign(checks.size(), Decision{});
    Verdict out;
    bool called = false;
    engine_.Decide({.batch = {.scope = scope, .checks = checks}, .fail_mode = mode}, decisions_,
                   [&](Verdict v) {
                     out = v;
                     called = true;
                   });
    EXPECT_TRUE(called);
    return out;
  }

  testing::FakeClock clock_;
  store::MemoryStore memory_{store::MemoryStoreOptions{.max_keys = 100, .shards = 1}, clock_};
  testing::FaultyStore faulty_{memory_};
  Engine engine_{faulty_};
  std::vector<Decision> decisions_;
};

TEST_F(EngineTest, PrimaryIsTheLimitingCheckWithTheLargestRetryAfter) {
  const Limit burst = Bucket(1, "1");
  const Limit slow = Bucket(1, "0.1");
  const std::vector<Check> checks = {{"burst", &burst, 1}, {"slow", &slow, 1}};
  ASSERT_EQ(Decide(checks).kind, Verdict::Kind::kAllowed);
  const Verdict v = Decide(checks);
  EXPECT_EQ(v.kind, Verdict::Kind::kRejected);
  EXPECT_EQ(v.primary, 1);
  EXPECT_EQ(v.retry_after, Duration::Seconds(10));
  EXPECT_EQ(v.code, core::RejectCode::kRateLimited);
  EXPECT_EQ(engine_.stats().rejected.load(), 1u);
}

TEST_F(EngineTest, PrimaryWhenAllowedIsTheSmallestRemaining) {
  const Limit big = Bucket(100, "1");
  const Limit small = Bucket(5, "1");
  const Verdict v = Decide({{"big", &big, 1}, {"small", &small, 1}});
  EXPECT_TRUE(v.allowed());
  EXPECT_EQ(v.primary, 1);
  EXPECT_EQ(decisions_[1].remaining, 4);
}

TEST_F(EngineTest, ShadowRejectionsAreCountedNotEnforced) {
  const Limit tiny = Bucket(1, "0.001");
  const std::vector<Check> checks = {{"burst", &tiny, 1, false}};
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(Decide(checks).allowed());
  EXPECT_EQ(engine_.stats().shadow_rejected.load(), 4u);
  EXPECT_EQ(engine_.stats().rejected.load(), 0u);
}

TEST_F(EngineTest, CostAboveCapacityIsRejectedWithoutRetryAfter) {
  const Limit b = Bucket(20, "0.5");
  const Verdict v = Decide({{"burst", &b, 21}});
  EXPECT_EQ(v.kind, Verdict::Kind::kRejected);
  EXPECT_EQ(v.code, core::RejectCode::kCostExceedsCapacity);
  EXPECT_TRUE(v.retry_after.IsInfinite());
}

TEST_F(EngineTest, StoreFailureFollowsTheRouteFailMode) {
  const Limit b = Bucket(1, "0.001");
  faulty_.FailAll(StoreErrc::kTimeout);
  const Verdict open = Decide({{"burst", &b, 1}}, FailMode::kOpen);
  EXPECT_EQ(open.kind, Verdict::Kind::kDegraded);
  EXPECT_TRUE(open.allowed());
  const Verdict closed = Decide({{"burst", &b, 1}}, FailMode::kClosed);
  EXPECT_EQ(closed.kind, Verdict::Kind::kUnavailable);
  EXPECT_FALSE(closed.allowed());
  EXPECT_GE(closed.retry_after, Duration::Seconds(1));
  EXPECT_EQ(engine_.stats().degraded.load(), 1u);
  EXPECT_EQ(engine_.stats().unavailable.load(), 1u);
  faulty_.FailAll(std::nullopt);
  EXPECT_EQ(Decide({{"burst", &b, 1}}).kind, Verdict::Kind::kAllowed);
}

// Whatever the store's error, the route's fail mode answers, the error is passed on, and the
// failed call consumed nothing: the bucket still holds its whole capacity afterwards.
TEST_F(EngineTest, EveryStoreErrorFollowsTheFailModeAndConsumesNothing) {
  const Limit b = Bucket(2, "0.001");
  const std::vector<Check> checks = {{"burst", &b, 1}};
  for (const StoreErrc error :
       {StoreErrc::kUnavailable, StoreErrc::kTimeout, StoreErrc::kProtocol}) {
    faulty_.FailCall(0, error);
    const Verdict open = Decide(checks, FailMode::kOpen);
    EXPECT_EQ(open.kind, Verdict::Kind::kDegraded);
    EXPECT_EQ(open.store_error, error);
    faulty_.FailCall(0, error);
    const Verdict closed = Decide(checks, FailMode::kClosed);
    EXPECT_EQ(closed.kind, Verdict::Kind::kUnavailable);
    EXPECT_EQ(closed.store_error, error);
    EXPECT_EQ(closed.retry_after, Duration::Seconds(1));
  }
  EXPECT_EQ(engine_.stats().degraded.load(), 3u);
  EXPECT_EQ(engine_.stats().unavailable.load(), 3u);
  EXPECT_EQ(Decide(checks).kind, Verdict::Kind::kAllowed);
  EXPECT_EQ(Decide(checks).kind, Verdict::Kind::kAllowed);
  EXPECT_EQ(Decide(checks).kind, Verdict::Kind::kRejected);
  EXPECT_EQ(engine_.stats().allowed.load(), 2u);
  EXPECT_EQ(engine_.stats().rejected.load(), 1u);
}

// The Nth call fails, for every N of a sequence (STYLE.md: every failure point once): only that
// request is answered by the fail mode, and the others share the whole budget between them.
TEST_F(EngineTest, OnlyTheFailedCallIsAnsweredByTheFailMode) {
  const Limit b = Bucket(3, "0.001");
  const std::vector<Check> checks = {{"burst", &b, 1}};
  constexpr int kCalls = 4;
  for (int n = 0; n < kCalls; ++n) {
    const std::string scope = "key:n" + std::to_string(n);
    faulty_.FailCall(static_cast<uint64_t>(n), StoreErrc::kTimeout);
    for (int i = 0; i < kCalls; ++i) {
      const Verdict v = Decide(checks, FailMode::kClosed, scope);
      EXPECT_EQ(v.kind, i == n ? Verdict::Kind::kUnavailable : Verdict::Kind::kAllowed)
          << "fault at " << n << ", call " << i;
    }
    EXPECT_EQ(Decide(checks, FailMode::kClosed, scope).kind, Verdict::Kind::kRejected) << n;
  }
  EXPECT_EQ(engine_.stats().unavailable.load(), static_cast<uint64_t>(kCalls));
  EXPECT_EQ(faulty_.calls(), static_cast<uint64_t>(kCalls * (kCalls + 1)));
}

// A store slow to answer: the request waits for it (no verdict yet), other requests are not
// held behind it, and it completes with the store's own answer once the store answers.
TEST_F(EngineTest, StalledCallCompletesWhenReleased) {
  const Limit b = Bucket(2, "0.001");
  const std::vector<Check> checks = {{"burst", &b, 1}};
  faulty_.StallCall(0);
  std::vector<Decision> stalled_decisions(1);
  std::optional<Verdict> stalled;
  engine_.Decide({.batch = {.scope = "key:k", .checks = checks}}, stalled_decisions,
                 [&](Verdict v) { stalled = v; });
  EXPECT_FALSE(stalled.has_value());
  EXPECT_EQ(faulty_.stalled(), 1);
  // The store decided the stalled call already (its token is spent); only its answer is late.
  const Verdict next = Decide(checks);
  EXPECT_EQ(next.kind, Verdict::Kind::kAllowed);
  EXPECT_EQ(decisions_[0].remaining, 0);
  EXPECT_EQ(Decide(checks).kind, Verdict::Kind::kRejected);
  EXPECT_FALSE(stalled.has_value());
  EXPECT_EQ(faulty_.Release(), 1);
  ASSERT_TRUE(stalled.has_value());
  EXPECT_EQ(stalled->kind, Verdict::Kind::kAllowed);
  EXPECT_EQ(stalled_decisions[0].remaining, 1);
  EXPECT_EQ(faulty_.stalled(), 0);
  EXPECT_EQ(engine_.stats().allowed.load(), 2u);
  EXPECT_EQ(engine_.stats().rejected.load(), 1u);
}

TEST(Combine, SoftAllowanceNeverBecomesTheHeadlinePolicy) {
  const Limit burst = Bucket(20, "1");
  const Limit soft =
      Limit::Create({.algorithm = core::Algorithm::kQuota, .allowance = 10, .ceiling = 100})
          .value();
  const std::vector<Check> checks = {{"burst", &burst, 1}, {"daily", &soft, 1}};
  std::vector<Decision> d(2);
  d[0].remaining = 15;
  d[1].remaining = 0;  // over its allowance but allowed
  const Verdict v = Combine(checks, d);
  EXPECT_EQ(v.primary, 0);
}

}  // namespace
}  // namespace tollgate::engine
