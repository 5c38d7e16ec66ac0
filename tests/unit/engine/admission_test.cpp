#include <tollgate/engine/checks.hpp>

#include <array>
#include <memory>
#include <string>

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
anonymous:
  limits:
    - {name: burst, capacity: 10, refill_per_second: 1}
keys:
  - {key: k-team, id: t, account: acme, plan: team}
  - {key: k-shared, id: s, account: acme, plan: shared}
routes:
  - {path: /v1/export, method: GET, cost: {query: pages, per: 50, min: 1}}
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
    const bool keyed = route.identity == config::RouteIdentity::kKey;
    const policy::Key* key = presented.empty() ? nullptr : pol_->FindByKey(presented);
    return engine::Admit(*pol_, route, keyed, key, "192.0.2.7", query, fixed_cost,
                         core::Instant::FromUnixMicros(1'800'000'000'000'000), checks_, scope_);
  }

  std::shared_ptr<const policy::Policy> pol_ = Build();
  std::array<store::Check, 16> checks_;
  std::string scope_ = "left over from the last request";
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

}  // namespace
}  // namespace tollgate::engine
