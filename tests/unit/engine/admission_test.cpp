#include <tollgate/engine/checks.hpp>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tollgate::engine {
namespace {

std::shared_ptr<const policy::Policy> Build() {
  auto c = config::ParseConfig(R"(
plans:
  team:
    limits:
      - {name: burst, capacity: 200, refill_per_second: 5}
      - {name: daily, algorithm: quota, period: day, ceiling: 1000}
  shared:
    scope: account
    limits:
      - {name: burst, capacity: 20, refill_per_second: 1}
  mixed:
    limits:
      - {name: burst, capacity: 20, refill_per_second: 1}
      - {name: monthly, algorithm: quota, period: month, ceiling: 5000, scope: account}
      - {name: per-ip, capacity: 50, refill_per_second: 1, scope: ip}
anonymous:
  limits:
    - {name: burst, capacity: 10, refill_per_second: 1}
keys:
  - {key: k-team, id: t, account: acme, plan: team}
  - {key: k-shared, id: s, account: acme, plan: shared}
  - {key: k-mixed, id: m, account: acme, plan: mixed}
routes:
  - {path: /v1/export, method: GET, cost: {query: pages, per: 50, min: 1}}
  - name: search
    path: /v1/search
    limits:
      - {name: mine, capacity: 5, refill_per_second: 1}
      - {name: upstream, scope: global, capacity: 100, refill_per_second: 100}
      - {name: addr, scope: ip, capacity: 9, refill_per_second: 1}
      - {name: team-only, capacity: 3, refill_per_second: 1, plans: {shared: unlimited}}
  - name: login
    path: /v1/login
    identity: key_or_ip
    limits:
      - {name: by-key, scope: key, capacity: 5, refill_per_second: 1}
      - {name: attempts, capacity: 3, refill_per_second: 1}
  - {path: /public/*, identity: ip}
  - {path: /health/*, identity: none}
)");
  EXPECT_TRUE(c.ok()) << c.error();
  auto p = policy::Policy::Build(std::move(c).value());
  EXPECT_TRUE(p.ok()) << p.error();
  return *p;
}

class AdmitTest : public ::testing::Test {
 protected:
  Admission Admit(std::string_view method, std::string_view path, std::string_view presented,
                  std::string_view query = "", std::optional<int64_t> fixed_cost = std::nullopt) {
    const policy::Route& route = pol_->Match(method, path);
    const bool keyed = LimitedByKey(route, !presented.empty());
    const policy::Key* key = presented.empty() ? nullptr : pol_->FindByKey(presented);
    return engine::Admit(*pol_, route, keyed, key, "192.0.2.7", query, fixed_cost,
                         core::Instant::FromUnixMicros(1'800'000'000'000'000), checks_, scopes_);
  }

  std::shared_ptr<const policy::Policy> pol_ = Build();
  std::array<store::Check, 16> checks_;
  Scopes scopes_{.primary = "left over from the last request"};
  const std::string& scope_ = scopes_.primary;
};

TEST_F(AdmitTest, AKeyTakesEveryLimitOfItsPlanAtTheRouteCost) {
  const Admission a = Admit("GET", "/v1/export", "k-team", "pages=120");
  ASSERT_EQ(a.kind, Admission::Kind::kChecks);
  EXPECT_EQ(a.plan->name, "team");
  EXPECT_EQ(a.key->id, "t");
  EXPECT_EQ(a.cost, 3);
  ASSERT_EQ(a.n, 2u);
  EXPECT_EQ(checks_[0].name, "burst");
  EXPECT_EQ(checks_[1].name, "daily");
  EXPECT_EQ(checks_[0].cost, 3);
  EXPECT_EQ(scope_, "key:t");
}

TEST_F(AdmitTest, APlanCountedPerAccountSharesTheAccountScope) {
  const Admission a = Admit("GET", "/v1/things", "k-shared");
  ASSERT_EQ(a.kind, Admission::Kind::kChecks);
  EXPECT_EQ(a.cost, 1);
  EXPECT_EQ(scope_, "account:acme");
}

TEST_F(AdmitTest, AMissingOrUnknownKeyTakesTheInvalidKeyLimitOfItsAddress) {
  for (const char* presented : {"", "k-nobody"}) {
    const Admission a = Admit("GET", "/v1/things", presented);
    ASSERT_EQ(a.kind, Admission::Kind::kInvalidKey) << presented;
    ASSERT_EQ(a.n, 1u);
    EXPECT_EQ(checks_[0].name, "invalid_key");
    EXPECT_EQ(checks_[0].limit, &pol_->invalid_key_limit());
    EXPECT_EQ(a.plan, nullptr);
    EXPECT_EQ(scope_, "badkey:192.0.2.7");
  }
}

TEST_F(AdmitTest, AnAddressRouteTakesTheAnonymousLimitsWhateverKeyIsPresented) {
  const Admission a = Admit("GET", "/public/page", "k-team");
  ASSERT_EQ(a.kind, Admission::Kind::kChecks);
  EXPECT_EQ(a.plan, &pol_->anonymous());
  EXPECT_EQ(a.key, nullptr);
  EXPECT_EQ(scope_, "ip:192.0.2.7");
}

TEST_F(AdmitTest, ARouteWithoutIdentityTakesNoChecks) {
  const Admission a = Admit("GET", "/health/live", "");
  EXPECT_EQ(a.kind, Admission::Kind::kNone);
  EXPECT_EQ(a.n, 0u);
}

TEST_F(AdmitTest, AnUnreadableCostIsAnErrorAndAFixedCostReadsNoQuery) {
  const Admission bad = Admit("GET", "/v1/export", "k-team", "pages=abc");
  EXPECT_EQ(bad.kind, Admission::Kind::kInvalidCost);
  EXPECT_FALSE(bad.error.empty());
  EXPECT_EQ(bad.plan->name, "team");
  const Admission fixed = Admit("GET", "/v1/export", "k-team", "pages=abc", 0);
  ASSERT_EQ(fixed.kind, Admission::Kind::kChecks);
  EXPECT_EQ(fixed.cost, 0);
  EXPECT_EQ(checks_[0].cost, 0);
}

// Route limits and per-limit scopes (issue 20): each check names its own scope when it is not
// the batch's, and the names carry the route (or, per address or global, the plan).
TEST_F(AdmitTest, RouteLimitsFollowThePlanLimitsEachInItsScope) {
  struct Want {
    const char* name;
    const char* scope;  // "" : the batch's
  };
  auto expect = [&](const Admission& a, std::vector<Want> want, const char* batch_scope) {
    ASSERT_EQ(a.kind, Admission::Kind::kChecks);
    ASSERT_EQ(a.n, want.size());
    EXPECT_EQ(scope_, batch_scope);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(checks_[i].name, want[i].name) << i;
      EXPECT_EQ(checks_[i].scope, want[i].scope) << want[i].name;
      EXPECT_EQ(checks_[i].cost, a.cost);
    }
  };
  expect(Admit("GET", "/v1/search", "k-team"),
         {{"burst", ""},
          {"daily", ""},
          {"search:mine", ""},
          {"search:upstream", "global"},
          {"search:addr", "ip:192.0.2.7"},
          {"search:team-only", ""}},
         "key:t");
  // A plan counted per account: its scope is the batch's; `unlimited` drops the check; a route
  // limit of the default scope counts per key.
  expect(Admit("GET", "/v1/search", "k-shared"),
         {{"burst", ""},
          {"search:mine", "key:s"},
          {"search:upstream", "global"},
          {"search:addr", "ip:192.0.2.7"}},
         "account:acme");
  // Per-limit scopes of a plan; a plan limit counted per address is named after its plan.
  expect(Admit("GET", "/v1/things", "k-mixed"),
         {{"burst", ""}, {"monthly", "account:acme"}, {"mixed:per-ip", "ip:192.0.2.7"}}, "key:m");
  // key_or_ip: with a key, both limits per key; without one, the per-key limit is skipped and
  // the other counts per address (the batch's scope), after the anonymous limits.
  expect(Admit("POST", "/v1/login", "k-team"),
         {{"burst", ""}, {"daily", ""}, {"login:by-key", ""}, {"login:attempts", ""}}, "key:t");
  expect(Admit("POST", "/v1/login", ""), {{"burst", ""}, {"login:attempts", ""}}, "ip:192.0.2.7");
}

// Issue 31: limits that protect the upstream or slow an attacker hold every caller whatever its
// plan's mode; a per-address limit can exempt keys only once they are enforced.
TEST(AdmitModes, SharedLimitsHoldShadowCallersAndExemptOnlyEnforcedKeys) {
  for (const char* global : {"enforce", "shadow"}) {
    auto c = config::ParseConfig(std::string("mode: ") + global + R"(
plans:
  dark: {mode: shadow, limits: [{name: burst, capacity: 20, refill_per_second: 1}]}
  live: {mode: enforce, limits: [{name: burst, capacity: 20, refill_per_second: 1}]}
keys:
  - {key: k-dark, id: d, plan: dark}
  - {key: k-live, id: l, plan: live}
routes:
  - name: search
    path: /v1/search
    limits:
      - {name: mine, capacity: 5, refill_per_second: 1}
      - {name: upstream, scope: global, capacity: 100, refill_per_second: 100}
      - {name: addr, scope: ip, capacity: 9, refill_per_second: 1}
      - {name: quiet, scope: ip, capacity: 9, refill_per_second: 1, mode: shadow}
      - {name: follows, scope: ip, capacity: 9, refill_per_second: 1, mode: caller}
      - {name: until, scope: ip, capacity: 9, refill_per_second: 1, exempt_enforced_keys: true}
)");
    ASSERT_TRUE(c.ok()) << c.error();
    auto p = policy::Policy::Build(std::move(c).value());
    ASSERT_TRUE(p.ok()) << p.error();
    const policy::Policy& pol = **p;
    const bool shared = std::string_view(global) == "enforce";
    struct Want {
      const char* key;
      std::vector<std::pair<const char*, bool>> checks;  // name, enforced
    };
    const Want wants[] = {
        {"k-dark",
         {{"burst", false},
          {"search:mine", false},
          {"search:upstream", shared},
          {"search:addr", shared},
          {"search:quiet", false},
          {"search:follows", false},
          {"search:until", shared}}},
        // An enforced caller is held to them under a global shadow mode too (a rollout that
        // enforces some plans first).
        {"k-live",
         {{"burst", true},
          {"search:mine", true},
          {"search:upstream", true},
          {"search:addr", true},
          {"search:quiet", false},
          {"search:follows", true}}},
    };
    for (const Want& w : wants) {
      std::array<store::Check, 16> checks;
      Scopes scopes;
      const policy::Route& route = pol.Match("GET", "/v1/search");
      const Admission a =
          engine::Admit(pol, route, true, pol.FindByKey(w.key), "192.0.2.7", "", std::nullopt,
                        core::Instant::FromUnixMicros(0), checks, scopes);
      ASSERT_EQ(a.n, w.checks.size()) << w.key << " " << global;
      for (size_t i = 0; i < a.n; ++i) {
        EXPECT_EQ(checks[i].name, w.checks[i].first) << w.key;
        EXPECT_EQ(checks[i].enforced, w.checks[i].second)
            << w.key << " " << checks[i].name << " mode " << global;
      }
    }
  }
}

}  // namespace
}  // namespace tollgate::engine
