// Which plan keys of an unknown plan get (issue 20): the enforced plan with the lowest sustained
// rate across all its limits; never a shadow plan while an enforced one exists.
#include <string>

#include <gtest/gtest.h>
#include <tollgate/policy/policy.hpp>

namespace tollgate::policy {
namespace {

std::string StrictestOf(const std::string& plans_yaml, const std::string& mode = "enforce") {
  auto c = config::ParseConfig("mode: " + mode + "\nplans:\n" + plans_yaml +
                               "keys:\n  - {key: k-unknown, id: u, plan: no-such-plan}\n");
  EXPECT_TRUE(c.ok()) << c.error();
  if (!c.ok()) return "";
  auto p = Policy::Build(std::move(c).value());
  EXPECT_TRUE(p.ok()) << p.error();
  if (!p.ok()) return "";
  EXPECT_EQ((*p)->FindById("u")->plan, &(*p)->strictest());
  return (*p)->strictest().name;
}

TEST(StrictestPlan, IsTheLowestSustainedRateOfTheEnforcedPlans) {
  struct Case {
    const char* why;
    const char* plans;
    const char* mode;
    const char* strictest;
  };
  const Case cases[] = {
      {"bucket refill, not capacity, is the sustained rate",
       "  big-burst-slow: {limits: [{name: b, capacity: 1000, refill_per_second: 1}]}\n"
       "  small-burst-fast: {limits: [{name: b, capacity: 5, refill_per_second: 10}]}\n",
       "enforce", "big-burst-slow"},
      {"every limit counts, not only the first",
       "  a: {limits: [{name: b, capacity: 5, refill_per_second: 10},\n"
       "               {name: q, algorithm: quota, period: day, ceiling: 8640}]}\n"  // 0.1/s
       "  b: {limits: [{name: b, capacity: 5, refill_per_second: 1}]}\n",
       "enforce", "a"},
      {"a shadow plan is never chosen while an enforced one exists",
       "  trial: {mode: shadow, limits: [{name: b, capacity: 1, refill_per_second: 0.01}]}\n"
       "  paid: {limits: [{name: b, capacity: 100, refill_per_second: 50}]}\n",
       "enforce", "paid"},
      {"an enforced plan in a shadow file is still preferred",
       "  loose: {limits: [{name: b, capacity: 1, refill_per_second: 0.01}]}\n"
       "  strict-enforced: {mode: enforce, limits: [{name: b, capacity: 100, refill_per_second: "
       "50}]}\n",
       "shadow", "strict-enforced"},
      {"all in shadow: the lowest rate of them all",
       "  fast: {limits: [{name: b, capacity: 10, refill_per_second: 10}]}\n"
       "  slow: {limits: [{name: b, capacity: 10, refill_per_second: 2}]}\n",
       "shadow", "slow"},
      {"windows: limit over the window",
       "  minute: {limits: [{name: w, algorithm: fixed_window, limit: 120, window_seconds: 60}]}\n"
       "  second: {limits: [{name: w, algorithm: sliding_window_log, limit: 3, window_seconds: "
       "1}]}\n",
       "enforce", "minute"},
      {"a quota allowance never rejects, so it is no limit",
       "  metered: {limits: [{name: q, algorithm: quota, period: day, allowance: 1}]}\n"
       "  capped: {limits: [{name: b, capacity: 100, refill_per_second: 100}]}\n",
       "enforce", "capped"},
      {"a plan without limits is unlimited",
       "  open: {unlimited: true}\n"
       "  capped: {limits: [{name: b, capacity: 100, refill_per_second: 100}]}\n",
       "enforce", "capped"},
      {"ties: the first in the file",
       "  first: {limits: [{name: b, capacity: 10, refill_per_second: 1}]}\n"
       "  second: {limits: [{name: b, capacity: 10, refill_per_minute: 60}]}\n",
       "enforce", "first"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.why);
    EXPECT_EQ(StrictestOf(c.plans, c.mode), c.strictest);
  }
}

}  // namespace
}  // namespace tollgate::policy
