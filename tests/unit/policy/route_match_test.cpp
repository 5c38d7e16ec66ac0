// Issue 31: a request meets the route its upstream would route it to, whatever the spelling;
// the cost parameter in every form a common parser reads; X-Forwarded-For entries with ports;
// cohorts that every process agrees on; keys of an unknown plan always enforced.
#include <string>

#include <gtest/gtest.h>
#include <tollgate/policy/policy.hpp>

namespace tollgate::policy {
namespace {

std::shared_ptr<const Policy> Build(const std::string& yaml) {
  auto c = config::ParseConfig(yaml);
  EXPECT_TRUE(c.ok()) << c.error();
  auto p = Policy::Build(std::move(c).value());
  EXPECT_TRUE(p.ok()) << p.error();
  return *p;
}

constexpr const char* kRoutes = R"(
plans:
  free: {limits: [{name: burst, capacity: 20, refill_per_second: 1}]}
anonymous:
  limits: [{name: ip, capacity: 5, refill_per_second: 1}]
routes:
  - {name: login, path: /login, method: POST, identity: ip, fail_mode: closed}
  - {name: export, path: /v1/export, cost: {query: pages, per: 50, min: 1}}
  - {name: user, path: "/v1/users/{id}/Messages"}
  - {name: files, path: /v1/files/*}
  - {name: exact, path: /v1/Exact, match: exact}
)";

TEST(RouteMatch, EverySpellingAnUpstreamRoutesAlikeMeetsTheRoute) {
  auto p = Build(kRoutes);
  const struct {
    const char* method;
    const char* path;
    const char* route;  // "" : the default route
  } cases[] = {
      {"POST", "/login", "login"},
      {"POST", "/LOGIN", "login"},
      {"POST", "/Login/", "login"},
      {"POST", "/login.", "login"},
      {"POST", "/LOGIN..", "login"},
      {"POST", "/login%20", "login"},
      {"POST", "/login.json", "login"},
      {"POST", "/LOGIN.JSON/", "login"},
      {"POST", "/login;jsessionid=0", "login"},
      {"POST", "/%EF%BC%AC%EF%BC%AF%EF%BC%A7%EF%BC%A9%EF%BC%AE", "login"},
      {"POST", "/l%EF%BD%8Fgin", "login"},
      {"post", "/login", "login"},
      {"Post", "/LOGIN", "login"},
      {"GET", "/login", ""},
      {"POST", "/login/x", ""},
      {"POST", "/loginx", ""},
      {"POST", "/login.tar.gz", ""},
      {"POST", "/login-json", ""},
      {"POST", "/login.json-x", "login"},
      {"POST", "/login.a_b", "login"},
      {"POST", "/log%C4%B0n", "login"},
      {"GET", "/V1/EXPORT", "export"},
      {"GET", "/v1/export.csv", "export"},
      {"GET", "/v1/Users/7/messages", "user"},
      {"GET", "/v1/users/7/MESSAGES.json", "user"},
      {"GET", "/V1/FILES/a/b", "files"},
      {"GET", "/v1/files.", "files"},
      {"GET", "/v1/Exact", "exact"},
      {"GET", "/v1/exact", ""},
      {"GET", "/V1/EXACT", ""},
  };
  for (const auto& c : cases) {
    const Route& r = p->Match(c.method, c.path);
    EXPECT_EQ(r.name, c.route) << c.method << " " << c.path;
  }
}

TEST(RouteMatch, TheStrictestRouteOfTheSpellingsApplies) {
  // Issue 31 review: a fold or a format suffix must never take a request to a looser route
  // than the one its exact spelling meets (a case-sensitive upstream routes by that one).
  auto p = Build(R"(
plans:
  free: {limits: [{name: burst, capacity: 20, refill_per_second: 1}]}
routes:
  - {name: report, path: /v1/report}
  - {name: report_pdf, path: /v1/report.pdf, cost: 50}
  - {name: items, path: /v1/items, identity: none}
  - {name: item, path: "/v1/items/{id}", cost: 10}
  - {name: status, path: /status, identity: none}
  - name: page
    path: "/{page}"
    limits: [{name: per-ip, scope: ip, capacity: 2, refill_per_second: 1}]
)");
  const struct {
    const char* path;
    const char* route;
  } cases[] = {
      {"/v1/report.pdf", "report_pdf"},
      {"/v1/report.csv", "report"},
      {"/V1/REPORT.PDF", "report_pdf"},
      {"/v1/items/...", "item"},
      {"/v1/items/%20", "item"},
      {"/v1/items/7", "item"},
      {"/v1/items", "items"},
      {"/status", "status"},
      {"/Status", "page"},
      {"/STATUS.", "page"},
      {"/other", "page"},
  };
  for (const auto& c : cases) EXPECT_EQ(p->Match("GET", c.path).name, c.route) << c.path;
  EXPECT_GT(Strictness(p->Match("GET", "/other")), Strictness(p->Match("GET", "/status")));
}

TEST(RouteMatch, ExactMatchingEverywhereWhenTheServerSaysSo) {
  auto p = Build(std::string("server: {route_match: exact}\n") + kRoutes);
  EXPECT_EQ(p->Match("POST", "/login").name, "login");
  EXPECT_EQ(p->Match("POST", "/LOGIN").name, "");
  EXPECT_EQ(p->Match("post", "/login").name, "");
  EXPECT_EQ(p->Match("GET", "/v1/export.csv").name, "");
}

TEST(RouteMatch, BadMatchSettingsAreRefused) {
  for (const char* bad : {"server: {route_match: loose}\nplans: {}\n",
                          "plans: {p: {limits: [{name: b, capacity: 1, refill_per_second: 1}]}}\n"
                          "routes: [{path: /a, match: nope}]\n"}) {
    auto c = config::ParseConfig(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.error().find("match"), std::string::npos) << c.error();
  }
}

TEST(RouteMatch, CostReadsEveryFormACommonParserReads) {
  auto p = Build(kRoutes);
  const Route& r = p->Match("GET", "/v1/export");
  const struct {
    const char* query;
    int64_t cost;  // -1: refused (400)
  } cases[] = {
      {"pages=5000", 100},
      {"pages[]=5000", 100},
      {"pages%5B%5D=5000", 100},
      {"pages%5b0%5d=5000", 100},
      {"pages[0]=5000", 100},
      {"pages[0]=1&pages[1]=5000", 100},
      {"pages[a]=5000", 100},
      {"pages[a][b]=5000", 100},
      {"pages[=5000", 100},
      {"PAGES=5000", 100},
      {"Pages[]=5000", 100},
      {"+pages=5000", 100},
      {"%20pages=5000", 100},
      {"x=1;pages=5000", 100},
      {"x=1&pages=1;pages=5000", 100},
      {"pages=1", 1},
      {"pagesx=5000", 1},
      {"pages_=5000", 1},
      {"xpages=5000", 1},
      {"pages[]=abc", -1},
      {"pages[]=-5", -1},
      {"[pages]=5000", 100},
      {"pages]=5000", 100},
      {"]pages=5000", 100},
      {"pages%00=5000", 100},
      {"pages%00x=5000", 100},
  };
  for (const auto& c : cases) {
    auto cost = p->Cost(r, c.query);
    if (c.cost < 0) {
      EXPECT_FALSE(cost.ok()) << c.query;
    } else {
      ASSERT_TRUE(cost.ok()) << c.query << ": " << cost.error();
      EXPECT_EQ(*cost, c.cost) << c.query;
    }
  }
}

TEST(RouteMatch, CostNamesAsPhpManglesThem) {
  auto p = Build(R"(
plans:
  free: {limits: [{name: burst, capacity: 20, refill_per_second: 1}]}
routes:
  - {name: list, path: /v1/list, cost: {query: per_page, per: 50, min: 1}}
)");
  const Route& r = p->Match("GET", "/v1/list");
  for (const char* q : {"per_page=5000", "per.page=5000", "per%20page=5000", "per+page=5000",
                        "per[page=5000", "PER.PAGE=5000", "per_page[]=5000"}) {
    auto cost = p->Cost(r, q);
    ASSERT_TRUE(cost.ok()) << q;
    EXPECT_EQ(*cost, 100) << q;
  }
  for (const char* q : {"perxpage=5000", "per..page=5000", "per_page_=5000"}) {
    EXPECT_EQ(*p->Cost(r, q), 1) << q;
  }
}

TEST(RouteMatch, ForwardedForEntriesWithPorts) {
  auto p = Build(std::string("identity: {trusted_proxies: [10.0.0.0/8]}\n") + kRoutes);
  const struct {
    const char* xff;
    const char* client;
    bool unparsed;
  } cases[] = {
      {"1.2.3.4:5678", "1.2.3.4", false},
      {"1.2.3.4", "1.2.3.4", false},
      {"[2001:db8::7]:443", "2001:db8::/64", false},
      {"[2001:db8::7]", "2001:db8::/64", false},
      {"2001:db8::7", "2001:db8::/64", false},
      {"\"[2001:db8::7]:443\"", "2001:db8::/64", false},
      {"9.9.9.9, 1.2.3.4:80, 10.0.0.2:1234", "1.2.3.4", false},
      {"1.2.3.4:", "10.0.0.1", true},
      {"1.2.3.4:123456", "10.0.0.1", true},
      {"1.2.3.4:x", "10.0.0.1", true},
      {"[2001:db8::7]x", "10.0.0.1", true},
      {"[2001:db8::7", "10.0.0.1", true},
      {"unknown", "10.0.0.1", true},
      {"_hidden", "10.0.0.1", true},
      {"1.2.3:80", "10.0.0.1", true},
      {"fe80::1%eth0", "fe80::/64", false},
      {"[fe80::1%25eth0]:443", "fe80::/64", false},
      {"[::ffff:1.2.3.4]:80", "1.2.3.4", false},
      {"1.2.3.4:0080", "1.2.3.4", false},
  };
  for (const auto& c : cases) {
    bool unparsed = false;
    EXPECT_EQ(p->ClientAddress("10.0.0.1", c.xff, &unparsed), c.client) << c.xff;
    EXPECT_EQ(unparsed, c.unparsed) << c.xff;
  }
}

TEST(RouteMatch, CohortsAreAFixedFunctionOfTheKeyId) {
  // XXH3-64 of the id under the cohort's fixed seed, mod 100: the same in every process (issue
  // 31: a per-process seed gave every replica and every restart another cohort).
  const struct {
    const char* id;
    int bucket;
  } cases[] = {{"key-0", 78}, {"key-1", 2},  {"key-2", 24}, {"key-3", 66},
               {"key-4", 52}, {"key-5", 91}, {"key-6", 49}, {"key-7", 85}};
  for (const auto& c : cases) {
    EXPECT_FALSE(InEnforcedCohort(c.id, c.bucket)) << c.id;
    EXPECT_TRUE(InEnforcedCohort(c.id, c.bucket + 1)) << c.id;
  }
}

TEST(RouteMatch, AKeyOfAnUnknownPlanIsAlwaysEnforced) {
  // The strictest plan is rolling out to 1 % of its keys: a key naming no plan gets it, and is
  // enforced all the same (issue 31), unless the key itself says shadow.
  auto p = Build(R"(
plans:
  slow: {enforce_percent: 1, limits: [{name: b, capacity: 1, refill_per_hour: 1}]}
  fast: {limits: [{name: b, capacity: 100, refill_per_second: 100}]}
keys:
  - {key: k1, id: key-0, plan: nosuch}
  - {key: k2, id: key-5, plan: typo}
  - {key: k3, id: key-6, plan: typo, mode: shadow}
  - {key: k4, id: key-7, plan: slow}
)");
  EXPECT_EQ(p->FindById("key-0")->plan->name, "slow");
  EXPECT_TRUE(p->FindById("key-0")->enforced);
  EXPECT_TRUE(p->FindById("key-5")->enforced);
  EXPECT_FALSE(p->FindById("key-6")->enforced);
  EXPECT_FALSE(p->FindById("key-7")->enforced);  // its own plan's cohort: 85 >= 1
}

TEST(RouteMatch, AKeyOfAnUnknownPlanFollowsAGlobalShadowMode) {
  auto p = Build(R"(
mode: shadow
plans:
  slow: {mode: enforce, limits: [{name: b, capacity: 1, refill_per_hour: 1}]}
keys:
  - {key: k1, id: key-0, plan: nosuch}
  - {key: k2, id: key-1, plan: slow}
)");
  EXPECT_FALSE(p->FindById("key-0")->enforced);
  EXPECT_TRUE(p->FindById("key-1")->enforced);
}

TEST(RouteMatch, APlanCountedPerAccountDrawsItsCohortByAccount) {
  // Keys of one account share its budget: one cohort for all of them.
  std::string yaml = R"(
plans:
  team: {scope: account, enforce_percent: 50, limits: [{name: b, capacity: 4, refill_per_hour: 1}]}
keys:
)";
  for (int a = 0; a < 20; ++a) {
    for (int k = 0; k < 5; ++k) {
      yaml += "  - {key: k-" + std::to_string(a) + "-" + std::to_string(k) + ", id: key-" +
              std::to_string(a) + "-" + std::to_string(k) + ", account: acct-" + std::to_string(a) +
              ", plan: team}\n";
    }
  }
  auto p = Build(yaml);
  int enforced_accounts = 0;
  for (int a = 0; a < 20; ++a) {
    const bool first = p->FindById("key-" + std::to_string(a) + "-0")->enforced;
    enforced_accounts += first;
    for (int k = 1; k < 5; ++k) {
      EXPECT_EQ(p->FindById("key-" + std::to_string(a) + "-" + std::to_string(k))->enforced, first)
          << a;
    }
    EXPECT_EQ(first, InEnforcedCohort("acct-" + std::to_string(a), 50));
  }
  EXPECT_GT(enforced_accounts, 0);
  EXPECT_LT(enforced_accounts, 20);
}

}  // namespace
}  // namespace tollgate::policy
