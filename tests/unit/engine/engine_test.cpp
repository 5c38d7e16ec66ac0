#include <tollgate/engine/engine.hpp>

#include <vector>

#include <gtest/gtest.h>

#include <tollgate/store/memory_store.hpp>
#include "support/fake_clock.hpp"

namespace tollgate::engine {
namespace {

using core::Decision;
using core::Duration;
using core::Limit;
using store::Check;

Limit Bucket(int64_t capacity, const char* per_second) {
  return Limit::Create({.algorithm = core::Algorithm::kTokenBucket,
                        .capacity = capacity,
                        .refill = core::Rate::Parse(per_second, 1).value()})
      .value();
}

// Fails every call while `failing` is set.
class FaultyStore final : public store::Store {
 public:
  explicit FaultyStore(store::Store& inner) : inner_(inner) {}
  void Apply(const store::Batch& b, std::span<Decision> d, Completion done) override {
    if (failing) {
      done(store::ApplyResult{.error = store::StoreErrc::kTimeout, .message = "deadline"});
      return;
    }
    inner_.Apply(b, d, std::move(done));
  }
  std::string_view Name() const override { return "faulty"; }
  bool failing = false;

 private:
  store::Store& inner_;
};

class EngineTest : public ::testing::Test {
 protected:
  Verdict Decide(const std::vector<Check>& checks, FailMode mode = FailMode::kOpen) {
    decisions_.assign(checks.size(), Decision{});
    Verdict out;
    bool called = false;
    engine_.Decide({.batch = {.scope = "key:k", .checks = checks}, .fail_mode = mode}, decisions_,
                   [&](Verdict v) {
                     out = v;
                     called = true;
                   });
    EXPECT_TRUE(called);
    return out;
  }

  testing::FakeClock clock_;
  store::MemoryStore memory_{store::MemoryStoreOptions{.max_keys = 100, .shards = 1}, clock_};
  FaultyStore faulty_{memory_};
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
  faulty_.failing = true;
  const Verdict open = Decide({{"burst", &b, 1}}, FailMode::kOpen);
  EXPECT_EQ(open.kind, Verdict::Kind::kDegraded);
  EXPECT_TRUE(open.allowed());
  const Verdict closed = Decide({{"burst", &b, 1}}, FailMode::kClosed);
  EXPECT_EQ(closed.kind, Verdict::Kind::kUnavailable);
  EXPECT_FALSE(closed.allowed());
  EXPECT_GE(closed.retry_after, Duration::Seconds(1));
  EXPECT_EQ(engine_.stats().degraded.load(), 1u);
  EXPECT_EQ(engine_.stats().unavailable.load(), 1u);
  faulty_.failing = false;
  EXPECT_EQ(Decide({{"burst", &b, 1}}).kind, Verdict::Kind::kAllowed);
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
