#include <tollgate/engine/admitter.hpp>

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
anonymous:
  limits:
    - {name: burst, capacity: 10, refill_per_second: 1}
keys:
  - {key: k-team, id: t, account: acme, plan: team}
  - {key: k-denied, id: d, account: acme2, plan: team}
routes:
  - {path: /v1/export, method: GET, cost: {query: pages, per: 50, min: 1}}
  - {path: /v1/items, method: DELETE, fail_mode: closed, cost: 3}
  - {path: /public/*, identity: ip}
  - {path: /health/*, identity: none}
deny:
  keys: [d]
  addresses: [198.51.100.7]
)");
  EXPECT_TRUE(c.ok()) << c.error();
  auto p = policy::Policy::Build(std::move(c).value());
  EXPECT_TRUE(p.ok()) << p.error();
  return *p;
}

// Calls fn for each of `methods`: a transport's header overrides.
struct Fields {
  std::vector<std::string_view> methods;
  template <class Fn>
  void operator()(Fn&& fn) const {
    for (std::string_view m : methods) fn(m);
  }
};

TEST(StrictestRoute, OverridesCountOnPostOnly) {
  auto pol = Build();
  struct Case {
    const char* method;
    const char* query;
    std::vector<std::string_view> fields;
    config::FailMode fail_mode;
  } cases[] = {
      {"POST", "", {}, config::FailMode::kOpen},
      {"POST", "", {"DELETE"}, config::FailMode::kClosed},
      {"post", "", {"delete"}, config::FailMode::kClosed},
      {"POST", "_method=DELETE", {}, config::FailMode::kClosed},
      {"POST", "_method=%20DELETE", {}, config::FailMode::kClosed},  // trimmed
      {"POST", "_method=", {}, config::FailMode::kOpen},
      {"PUT", "_method=DELETE", {"DELETE"}, config::FailMode::kOpen},
      {"DELETE", "", {}, config::FailMode::kClosed},
  };
  for (const Case& c : cases) {
    const policy::Route& r = StrictestRoute(*pol, c.method, "/v1/items", c.query, Fields{c.fields});
    EXPECT_EQ(r.fail_mode, c.fail_mode) << c.method << " " << c.query;
  }
}

TEST(Admitter, TableOfKeysRoutesCostsAndDenyList) {
  auto pol = Build();
  policy::DenyList runtime;
  ASSERT_FALSE(runtime.Add(policy::DenyList::Kind::kAddress, "192.0.2.5"));
  struct Case {
    const char* name;
    const char* method;
    const char* path;
    const char* query;
    const char* key;  // presented; "" none
    const char* client;
    std::optional<int64_t> fixed_cost;
    bool with_runtime;
    Admission::Kind kind;
    bool denied;
    const char* plan;  // "" none
    int64_t cost;
    size_t n;
  } cases[] = {
      {"key",
       "GET",
       "/v1/x",
       "",
       "k-team",
       "10.0.0.1",
       {},
       false,
       Admission::Kind::kChecks,
       false,
       "team",
       1,
       1},
      {"cost from query",
       "GET",
       "/v1/export",
       "pages=120",
       "k-team",
       "10.0.0.1",
       {},
       false,
       Admission::Kind::kChecks,
       false,
       "team",
       3,
       1},
      {"fixed cost wins", "GET", "/v1/export", "pages=120", "k-team", "10.0.0.1", 0, false,
       Admission::Kind::kChecks, false, "team", 0, 1},
      {"bad cost",
       "GET",
       "/v1/export",
       "pages=x",
       "k-team",
       "10.0.0.1",
       {},
       false,
       Admission::Kind::kInvalidCost,
       false,
       "team",
       0,
       0},
      {"no key",
       "GET",
       "/v1/x",
       "",
       "",
       "10.0.0.1",
       {},
       false,
       Admission::Kind::kInvalidKey,
       false,
       "",
       0,
       1},
      {"unknown key",
       "GET",
       "/v1/x",
       "",
       "k-nope",
       "10.0.0.1",
       {},
       false,
       Admission::Kind::kInvalidKey,
       false,
       "",
       0,
       1},
      {"anonymous",
       "GET",
       "/public/a",
       "",
       "",
       "10.0.0.1",
       {},
       false,
       Admission::Kind::kChecks,
       false,
       "anonymous",
       1,
       1},
      {"none",
       "GET",
       "/health/a",
       "",
       "",
       "10.0.0.1",
       {},
       false,
       Admission::Kind::kNone,
       false,
       "",
       0,
       0},
      {"denied key",
       "GET",
       "/v1/x",
       "",
       "k-denied",
       "10.0.0.1",
       {},
       false,
       Admission::Kind::kNone,
       true,
       "team",
       0,
       0},
      {"denied address",
       "GET",
       "/public/a",
       "",
       "",
       "198.51.100.7",
       {},
       false,
       Admission::Kind::kNone,
       true,
       "",
       0,
       0},
      {"key on ip route not read",
       "GET",
       "/public/a",
       "",
       "k-denied",
       "10.0.0.1",
       {},
       false,
       Admission::Kind::kChecks,
       false,
       "anonymous",
       1,
       1},
      {"runtime list",
       "GET",
       "/v1/x",
       "",
       "k-team",
       "192.0.2.5",
       {},
       true,
       Admission::Kind::kNone,
       true,
       "team",
       0,
       0},
      {"runtime list not given",
       "GET",
       "/v1/x",
       "",
       "k-team",
       "192.0.2.5",
       {},
       false,
       Admission::Kind::kChecks,
       false,
       "team",
       1,
       1},
      {"override fixed cost",
       "POST",
       "/v1/items",
       "_method=DELETE",
       "k-team",
       "10.0.0.1",
       {},
       false,
       Admission::Kind::kChecks,
       false,
       "team",
       3,
       1},
  };
  for (const Case& c : cases) {
    const policy::Route& route =
        StrictestRoute(*pol, c.method, c.path, c.query, NoOverrideFields{});
    const std::string_view presented = c.key;
    std::array<store::Check, kMaxChecks> checks;
    Scopes scopes;
    const Admitted a =
        Admitter(*pol).Admit({.route = &route,
                              .presented_key = !presented.empty(),
                              .key = presented.empty() ? nullptr : pol->FindByKey(presented),
                              .client = c.client,
                              .query = c.query,
                              .fixed_cost = c.fixed_cost,
                              .runtime_deny = c.with_runtime ? &runtime : nullptr},
                             checks, scopes);
    EXPECT_EQ(a.kind, c.kind) << c.name;
    EXPECT_EQ(a.denied, c.denied) << c.name;
    EXPECT_EQ(a.plan ? a.plan->name : "", c.plan) << c.name;
    EXPECT_EQ(a.cost, c.cost) << c.name;
    EXPECT_EQ(a.n, c.n) << c.name;
    EXPECT_EQ(a.route, &route) << c.name;
  }
}

TEST(Admitter, WithoutRouteTheIdentitysPlanOnly) {
  auto pol = Build();
  std::array<store::Check, kMaxChecks> checks;
  Scopes scopes;
  const Admitter admitter(*pol);
  Admitted a = admitter.Admit(
      {.presented_key = true, .key = pol->FindByKey("k-team"), .fixed_cost = 4}, checks, scopes);
  EXPECT_EQ(a.kind, Admission::Kind::kChecks);
  EXPECT_EQ(a.cost, 4);
  EXPECT_EQ(scopes.primary, "key:t");
  a = admitter.Admit({.client = "10.0.0.1"}, checks, scopes);
  EXPECT_EQ(a.plan, &pol->anonymous());
  EXPECT_EQ(scopes.primary, "ip:10.0.0.1");
  a = admitter.Admit({.presented_key = true, .key = pol->FindByKey("k-denied")}, checks, scopes);
  EXPECT_TRUE(a.denied);
  a = admitter.Admit({.presented_key = true}, checks, scopes);
  EXPECT_EQ(a.kind, Admission::Kind::kInvalidKey);
  EXPECT_EQ(a.n, 0u);
}

}  // namespace
}  // namespace tollgate::engine
