// Enforcement rolled out by cohort (issue 20): a key's own mode, a plan's stable share of keys.
#include <string>

#include <gtest/gtest.h>
#include <tollgate/policy/policy.hpp>

namespace tollgate::policy {
namespace {

TEST(Cohort, IsAStableShareThatOnlyGrows) {
  constexpr int kKeys = 20'000;
  int previous = 0;
  for (int percent : {0, 1, 10, 50, 90, 100}) {
    int in = 0;
    for (int i = 0; i < kKeys; ++i) {
      const std::string id = "key-" + std::to_string(i);
      const bool enforced = InEnforcedCohort(id, percent);
      in += enforced;
      // Raising the percentage keeps every key already in the cohort.
      for (int higher : {percent + 1, percent + 10, 100}) {
        if (enforced && higher <= 100) {
          EXPECT_TRUE(InEnforcedCohort(id, higher)) << id;
        }
      }
      EXPECT_EQ(enforced, InEnforcedCohort(id, percent));  // the same answer every time
    }
    // Within 1.5 points of the share asked for, over 20,000 ids.
    EXPECT_NEAR(100.0 * in / kKeys, percent, 1.5) << percent;
    EXPECT_GE(in, previous);
    previous = in;
  }
}

TEST(Cohort, KeyModeThenPlanCohortThenPlanMode) {
  auto c = config::ParseConfig(R"(
mode: enforce
plans:
  rollout: {enforce_percent: 0, limits: [{name: b, capacity: 1, refill_per_second: 1}]}
  everyone: {enforce_percent: 100, limits: [{name: b, capacity: 1, refill_per_second: 1}]}
  quiet: {mode: shadow, limits: [{name: b, capacity: 1, refill_per_second: 1}]}
keys:
  - {key: k1, id: internal, plan: rollout, mode: enforce}
  - {key: k2, id: customer, plan: rollout}
  - {key: k3, id: all-in, plan: everyone}
  - {key: k4, id: quiet-one, plan: quiet}
  - {key: k5, id: loud-one, plan: quiet, mode: enforce}
  - {key: k6, id: opted-out, plan: everyone, mode: shadow}
)");
  ASSERT_TRUE(c.ok()) << c.error();
  auto p = Policy::Build(std::move(c).value());
  ASSERT_TRUE(p.ok()) << p.error();
  const struct {
    const char* id;
    bool enforced;
  } expected[] = {{"internal", true},   {"customer", false}, {"all-in", true},
                  {"quiet-one", false}, {"loud-one", true},  {"opted-out", false}};
  for (const auto& e : expected) EXPECT_EQ((*p)->FindById(e.id)->enforced, e.enforced) << e.id;
}

TEST(Cohort, BadSettingsAreRefusedNamingTheField) {
  const char* plans = "plans:\n  p: {limits: [{name: b, capacity: 1, refill_per_second: 1}], ";
  struct Case {
    std::string yaml;
    const char* field;
  };
  const Case cases[] = {
      {std::string(plans) + "enforce_percent: 101}\n", "plans.p.enforce_percent"},
      {std::string(plans) + "enforce_percent: -1}\n", "plans.p.enforce_percent"},
      {std::string(plans) + "enforce_percent: ten}\n", "plans.p.enforce_percent"},
      {std::string(plans) + "enforce_percent: 10, mode: shadow}\n", "plans.p.enforce_percent"},
      {std::string(plans) + "mode: shadow}\nkeys:\n  - {key: k, id: a, plan: p, mode: loud}\n",
       "mode"},
  };
  for (const Case& c : cases) {
    auto parsed = config::ParseConfig(c.yaml);
    ASSERT_FALSE(parsed.ok()) << c.yaml;
    EXPECT_NE(parsed.error().find(c.field), std::string::npos) << parsed.error();
  }
}

}  // namespace
}  // namespace tollgate::policy
