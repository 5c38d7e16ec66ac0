#include <tollgate/config/config.hpp>

#include <gtest/gtest.h>

namespace tollgate::config {
namespace {

const char* kMinimal = R"(
plans:
  free:
    limits:
      - {name: burst, algorithm: token_bucket, capacity: 20, refill_per_second: 0.5}
      - {name: daily, algorithm: quota, period: day, allowance: 1000, ceiling: 10000}
keys:
  - {key: k1, id: one, plan: free}
)";

std::string ErrorOf(const std::string& yaml) {
  auto c = ParseConfig(yaml);
  return c ? "" : c.error();
}

TEST(Config, ParsesAndHashesKeys) {
  auto c = ParseConfig(kMinimal);
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_EQ(c->plans.size(), 1u);
  EXPECT_EQ(c->plans[0].limits[0].spec.capacity, 20);
  EXPECT_EQ(c->plans[0].limits[1].spec.ceiling, 10000);
  ASSERT_EQ(c->keys.size(), 1u);
  EXPECT_EQ(c->keys[0].sha256_hex, Sha256Hex("k1"));
  EXPECT_EQ(c->keys[0].account, "one");  // defaults to the key id
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Config, ErrorsNameTheField) {
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: burst, capacity: 0, refill_per_second: 1}]}}"),
            "plans.free.limits[0].capacity: must be >= 1, got 0");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: burst, capacity: -5, refill_per_second: 1}]}}"),
            "plans.free.limits[0].capacity: must be >= 1, got -5");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: b, capacity: 5, refill_per_second: 0}]}}"),
            "plans.free.limits[0].refill_per_second: must be > 0, got '0'");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: b, algorithm: leaky, capacity: 5}]}}"),
            "plans.free.limits[0].algorithm: unknown 'leaky' (token_bucket, sliding_window_log, "
            "sliding_window_counter, fixed_window, quota)");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: b, capacity: 99999999999999999999, "
                    "refill_per_second: 1}]}}"),
            "plans.free.limits[0].capacity: out of range: 99999999999999999999");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: b, algorithm: fixed_window, limit: 5}]}}"),
            "plans.free.limits[0].window_seconds: required for fixed_window");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: b, capacity: 5, refill_per_second: 1, "
                    "window_seconds: 3}]}}"),
            "plans.free.limits[0].window_seconds: does not apply to algorithm token_bucket");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: b, capacity: 5, refil_per_second: 1}]}}"),
            "plans.free.limits[0].refil_per_second: unknown field");
  EXPECT_EQ(ErrorOf("mode: loud\nplans: {free: {limits: []}}"),
            "mode: must be enforce or shadow, got 'loud'");
  EXPECT_EQ(ErrorOf("plans: {}"), "plans: at least one plan is required");
  EXPECT_NE(ErrorOf("plans: [unclosed"), "");
}

TEST(Config, OverridesStartFromThePlanLimit) {
  auto c = ParseConfig(std::string(kMinimal) + R"(
  - key: k2
    id: two
    plan: free
    overrides:
      burst: {capacity: 500, expires: "2026-12-31"}
)");
  ASSERT_TRUE(c.ok()) << c.error();
  const auto& o = c->keys[1].overrides.at(0);
  EXPECT_EQ(o.spec.capacity, 500);
  EXPECT_EQ(o.spec.refill, (core::Rate{1, 2'000'000}));  // kept from the plan
  EXPECT_EQ(o.expires_unix_s, core::DaysFromCivil({2026, 12, 31}) * 86'400);

  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "  - {key: k3, id: three, plan: free, overrides: "
                                              "{nope: {capacity: 1}}}\n"),
            "keys[1].overrides.nope: plan 'free' has no limit named 'nope'");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "  - {key: k3, id: three, plan: free, overrides: "
                                              "{burst: {capacity: 1, expires: soon}}}\n"),
            "keys[1].overrides.burst.expires: must be a UTC date (2026-12-31) or time "
            "(2026-12-31T23:00:00Z), got 'soon'");
}

TEST(Config, RejectsDuplicates) {
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "  - {key: k1, id: other, plan: free}\n"),
            "keys[1]: duplicate key");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "  - {key: k9, id: one, plan: free}\n"),
            "keys[1].id: duplicate 'one'");
}

TEST(Config, Routes) {
  auto c = ParseConfig(std::string(kMinimal) + R"(
routes:
  - {path: /v1/export, method: GET, cost: {query: pages, per: 50, min: 1}}
  - {path: /login, identity: ip, fail_mode: closed}
anonymous:
  limits: [{name: ip, capacity: 10, refill_per_second: 1}]
)");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->routes[0].cost.query, "pages");
  EXPECT_EQ(c->routes[0].cost.per, 50);
  EXPECT_EQ(c->routes[1].fail_mode, FailMode::kClosed);
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "routes: [{path: /x, fail_mode: maybe}]\n"),
            "routes[0].fail_mode: must be open or closed, got 'maybe'");
}

}  // namespace
}  // namespace tollgate::config
