#include "http/decision_counters.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tollgate::http {
namespace {

// The value of the registry's counter `name{labels}`, or -1 when it was never created.
int64_t ValueOf(const metrics::Registry& r, std::string_view name, std::string_view labels) {
  for (const auto& s : r.Samples(name)) {
    if (s.labels == labels) return static_cast<int64_t>(s.value);
  }
  return -1;
}

policy::Plan PlanNamed(std::string name) {
  policy::Plan p;
  p.name = std::move(name);
  return p;
}

class DecisionCountersTest : public ::testing::Test {
 protected:
  metrics::Registry registry;
  DecisionCounters counters{registry};
  const policy::Plan free = PlanNamed("free");
  const std::string burst = "burst";

  // tollgate_decisions_total{plan,check,result} now; -1 when it was never created.
  int64_t Decided(std::string_view plan, std::string_view check, std::string_view result) const {
    return ValueOf(registry, "tollgate_decisions_total",
                   metrics::Label("plan", plan) + "," + metrics::Label("check", check) + "," +
                       metrics::Label("result", result));
  }
};

TEST_F(DecisionCountersTest, CountsPerPlanCheckAndResult) {
  const policy::Plan team = PlanNamed("team");
  const std::string daily = "daily";
  counters.Decision(1, free, burst, CheckResult::kAllowed).fetch_add(1);
  counters.Decision(1, free, burst, CheckResult::kAllowed).fetch_add(1);
  counters.Decision(1, free, burst, CheckResult::kRejected).fetch_add(1);
  counters.Decision(1, free, daily, CheckResult::kShadowRejected).fetch_add(1);
  counters.Decision(1, team, burst, CheckResult::kAllowed).fetch_add(1);
  EXPECT_EQ(Decided("free", "burst", "allowed"), 2);
  EXPECT_EQ(Decided("free", "burst", "rejected"), 1);
  EXPECT_EQ(Decided("free", "daily", "shadow_rejected"), 1);
  EXPECT_EQ(Decided("team", "burst", "allowed"), 1);
  EXPECT_EQ(registry.Samples("tollgate_decisions_total").size(), 4u);
  EXPECT_EQ(counters.size(), 4u);
}

TEST_F(DecisionCountersTest, ResolvesACounterOnce) {
  std::atomic<uint64_t>& first = counters.Decision(1, free, burst, CheckResult::kAllowed);
  EXPECT_EQ(&counters.Decision(1, free, burst, CheckResult::kAllowed), &first);
  EXPECT_EQ(&first, &registry.Counter("tollgate_decisions_total",
                                      "plan=\"free\",check=\"burst\",result=\"allowed\""));
  EXPECT_EQ(counters.size(), 1u);
}

TEST_F(DecisionCountersTest, PlanWideCountersAreApartFromChecks) {
  counters.Rejection(1, free, core::RejectCode::kRateLimited).fetch_add(1);
  counters.Rejection(1, free, core::RejectCode::kQuotaExceeded).fetch_add(2);
  counters.Mode(1, free, true).fetch_add(3);
  counters.Mode(1, free, false).fetch_add(4);
  counters.ShadowRejection(1, free).fetch_add(5);
  EXPECT_EQ(ValueOf(registry, "tollgate_rejections_total", "plan=\"free\",code=\"rate_limited\""),
            1);
  EXPECT_EQ(ValueOf(registry, "tollgate_rejections_total", "plan=\"free\",code=\"quota_exceeded\""),
            2);
  EXPECT_EQ(ValueOf(registry, "tollgate_requests_by_mode_total", "plan=\"free\",mode=\"enforce\""),
            3);
  EXPECT_EQ(ValueOf(registry, "tollgate_requests_by_mode_total", "plan=\"free\",mode=\"shadow\""),
            4);
  EXPECT_EQ(ValueOf(registry, "tollgate_shadow_rejections_total", "plan=\"free\""), 5);
  // A rejection code and a mode of the same number are different counters.
  EXPECT_NE(&counters.Rejection(1, free, core::RejectCode::kRateLimited),
            &counters.Mode(1, free, true));
  EXPECT_EQ(counters.size(), 5u);
}

TEST_F(DecisionCountersTest, ANewerGenerationStartsTheTableOver) {
  std::atomic<uint64_t>& old_counter = counters.Decision(1, free, burst, CheckResult::kAllowed);
  counters.Mode(1, free, true);
  EXPECT_EQ(counters.size(), 2u);
  // A plan of the new policy, named the same: the same registry counter, found anew.
  const policy::Plan renewed = PlanNamed("free");
  EXPECT_EQ(&counters.Decision(2, renewed, burst, CheckResult::kAllowed), &old_counter);
  EXPECT_EQ(counters.size(), 1u);
  // A request that began before the reload still counts, and does not empty the table.
  counters.Mode(1, free, true).fetch_add(1);
  EXPECT_EQ(counters.size(), 2u);
  EXPECT_EQ(ValueOf(registry, "tollgate_requests_by_mode_total", "plan=\"free\",mode=\"enforce\""),
            1);
}

}  // namespace
}  // namespace tollgate::http
