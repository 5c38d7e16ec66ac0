#include <tollgate/policy/policy.hpp>

#include <cctype>
#include <map>

#include <gtest/gtest.h>

#include <tollgate/util/digest.hpp>

namespace tollgate::policy {
namespace {

std::shared_ptr<const Policy> Build(const std::string& extra = "") {
  auto c = config::ParseConfig(R"(
identity:
  trusted_proxies: [10.0.0.0/8, "fd00::/8"]
plans:
  team:
    limits:
      - {name: burst, capacity: 200, refill_per_second: 5}
  free:
    limits:
      - {name: burst, capacity: 20, refill_per_second: 0.5}
keys:
  - {key: k-free, id: f, plan: free}
  - {key: k-gold, id: g, plan: gold}
  - key: k-over
    id: o
    plan: team
    overrides:
      burst: {capacity: 5000, expires: "2026-12-31"}
routes:
  - {path: /v1/export, method: GET, cost: {query: pages, per: 50, min: 1}}
  - {path: /public/*, identity: none}
)" + extra);
  EXPECT_TRUE(c.ok()) << c.error();
  auto p = Policy::Build(std::move(c).value());
  EXPECT_TRUE(p.ok()) << p.error();
  return *p;
}

std::string Raw(const std::string& hex) {
  std::string raw;
  for (size_t i = 0; i < hex.size(); i += 2)
    raw += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return raw;
}

TEST(Policy, UnknownPlanGetsTheStrictestPlan) {
  auto p = Build();
  const Key* k = p->FindByDigest(Raw(util::Sha256Hex("k-gold")));
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->plan->name, "free");
  EXPECT_EQ(k->plan_name, "gold");
  EXPECT_EQ(p->FindByDigest(Raw(util::Sha256Hex("nope"))), nullptr);
}

TEST(Policy, OverrideAppliesUntilItExpires) {
  auto p = Build();
  const Key* k = p->FindById("o");
  ASSERT_NE(k, nullptr);
  const core::Instant before =
      core::Instant::FromUnixSeconds(core::DaysFromCivil({2026, 12, 30}) * 86'400);
  const core::Instant after =
      core::Instant::FromUnixSeconds(core::DaysFromCivil({2026, 12, 31}) * 86'400);
  EXPECT_EQ(k->LimitAt(0, before).PolicyQuota(), 5000);
  EXPECT_EQ(k->LimitAt(0, after).PolicyQuota(), 200);
}

TEST(Policy, RouteCost) {
  auto p = Build();
  const Route& r = p->Match("GET", "/v1/export");
  EXPECT_EQ(*p->Cost(r, "pages=120"), 3);
  EXPECT_EQ(*p->Cost(r, "x=1&pages=50"), 1);
  EXPECT_EQ(*p->Cost(r, "pages=51"), 2);
  EXPECT_EQ(*p->Cost(r, "pages=0"), 1);
  EXPECT_EQ(*p->Cost(r, ""), 1);
  EXPECT_FALSE(p->Cost(r, "pages=-3").ok());
  EXPECT_FALSE(p->Cost(r, "pages=abc").ok());
  EXPECT_FALSE(p->Cost(r, "pages=99999999999999999999999").ok());
  EXPECT_EQ(*p->Cost(p->Match("POST", "/v1/export"), "pages=500"), 1);  // method differs
  EXPECT_EQ(p->Match("GET", "/public/a/b").identity, config::RouteIdentity::kNone);
}

TEST(Policy, CostReadsTheQueryAsTheUpstreamDoes) {
  // Issue 18: a cost parameter spelt another way, or given twice, was costed 1.
  auto p = Build();
  const Route& r = p->Match("GET", "/v1/export");
  EXPECT_EQ(*p->Cost(r, "pag%65s=5000"), 100);
  EXPECT_EQ(*p->Cost(r, "%70ages=5000"), 100);
  EXPECT_EQ(*p->Cost(r, "pages=1&pages=5000"), 100);
  EXPECT_EQ(*p->Cost(r, "pages=5000&pages=1"), 100);
  EXPECT_EQ(*p->Cost(r, "pages=%35000"), 100);
  EXPECT_FALSE(p->Cost(r, "pages=1&pages=x").ok());
  EXPECT_FALSE(p->Cost(r, "pages=+5000").ok());  // a space is not a digit
}

TEST(Policy, RoutesMatchWholeSegmentsAndExactMethods) {
  auto p = Build(R"(
  - {path: /login, method: POST, identity: ip}
  - {path: /v1/items/, identity: none}
anonymous:
  limits: [{name: ip, capacity: 5, refill_per_second: 1}]
)");
  const Route& fallback = p->Match("GET", "/nothing");
  for (const char* path : {"/login", "/login/"})
    EXPECT_EQ(p->Match("POST", path).identity, config::RouteIdentity::kIp) << path;
  for (const char* path : {"/login/x", "/loginx", "/logi"})
    EXPECT_EQ(&p->Match("POST", path), &fallback) << path;
  EXPECT_EQ(&p->Match("GET", "/login"), &fallback);
  EXPECT_EQ(p->Match("GET", "/v1/items").identity,
            config::RouteIdentity::kNone);  // exact, stored without '/'
  EXPECT_EQ(p->Match("GET", "/v1/items/").identity, config::RouteIdentity::kNone);
  // Prefix routes: the segment itself and below it, never a longer segment.
  for (const char* path : {"/public", "/public/", "/public/a/b"}) {
    EXPECT_EQ(p->Match("GET", path).identity, config::RouteIdentity::kNone) << path;
  }
  EXPECT_EQ(&p->Match("GET", "/publicity"), &fallback);
  // HEAD is GET without the body: it costs what GET costs.
  EXPECT_EQ(*p->Cost(p->Match("HEAD", "/v1/export"), "pages=5000"), 100);
  EXPECT_EQ(*p->Cost(p->Match("HEAD", "/v1/export/"), "pages=5000"), 100);
}

TEST(Policy, ClientAddressTrustsOnlyConfiguredProxies) {
  auto p = Build();
  // An untrusted peer's X-Forwarded-For is ignored.
  EXPECT_EQ(p->ClientAddress("203.0.113.7", "1.2.3.4"), "203.0.113.7");
  // A trusted proxy: the right-most address that is not a trusted proxy.
  EXPECT_EQ(p->ClientAddress("10.0.0.1", "1.2.3.4, 198.51.100.9, 10.1.1.1"), "198.51.100.9");
  EXPECT_EQ(p->ClientAddress("10.0.0.1", ""), "10.0.0.1");
  EXPECT_EQ(p->ClientAddress("10.0.0.1", "garbage"), "10.0.0.1");
  bool unparsed = false;
  EXPECT_EQ(p->ClientAddress("10.0.0.1", "1.2.3.4, unknown", &unparsed), "10.0.0.1");
  EXPECT_TRUE(unparsed);
  // IPv6 grouped by /64; mapped IPv4 is IPv4.
  EXPECT_EQ(p->ClientAddress("2001:db8:1:2:3:4:5:6", ""), "2001:db8:1:2::/64");
  EXPECT_EQ(p->ClientAddress("2001:db8:1:2:ffff::1", ""), "2001:db8:1:2::/64");
  EXPECT_EQ(p->ClientAddress("::ffff:192.0.2.1", ""), "192.0.2.1");
  EXPECT_EQ(p->ClientAddress("0.0.0.0", ""), "0.0.0.0");
  EXPECT_EQ(p->ClientAddress("255.255.255.255", ""), "255.255.255.255");
  EXPECT_EQ(p->ClientAddress("::ffff:10.20.0.255", ""), "10.20.0.255");
  EXPECT_EQ(p->ClientAddress("fd00::1", "2001:db8::5"), "2001:db8::/64");
}

TEST(Policy, PresentedKey) {
  auto p = Build();
  auto from = [&](std::map<std::string, std::string> h) {
    return std::string(p->PresentedKey([&](const std::string& n) -> std::string_view {
      auto it = h.find(n);
      return it == h.end() ? std::string_view() : std::string_view(it->second);
    }));
  };
  EXPECT_EQ(from({{"Authorization", "Bearer abc"}}), "abc");
  EXPECT_EQ(from({{"Authorization", "bearer  abc "}}), "abc");
  EXPECT_EQ(from({{"Authorization", "Basic xyz"}, {"X-API-Key", "k"}}), "k");
  EXPECT_EQ(from({}), "");
}

TEST(Policy, Cidr) {
  EXPECT_TRUE(ParseCidr("10.0.0.0/8")->Contains(*ParseAddress("10.200.1.1")));
  EXPECT_FALSE(ParseCidr("10.0.0.0/8")->Contains(*ParseAddress("11.0.0.1")));
  EXPECT_TRUE(ParseCidr("::1")->Contains(*ParseAddress("[::1]")));
  EXPECT_FALSE(ParseCidr("10.0.0.0/33").ok());
  EXPECT_FALSE(ParseCidr("hello").ok());
}

TEST(Policy, FromKeyLimitTakesTheKeyColumns) {
  auto c = config::ParseConfig(R"(
plans:
  free:
    limits:
      - {name: burst, capacity: 20, refill_per_second: 0.5}
      - {name: minute, algorithm: sliding_window_log, window_seconds: 60, limit: 60, from_key: true}
keys:
  - {key: k-cols, id: cols, plan: free, rate_limit_per_minute: 30, rate_limit_burst: 10}
  - {key: k-none, id: none, plan: free}
  - {key: k-gold, id: gold, plan: gold, rate_limit_per_minute: 30, rate_limit_burst: 10}
  - key: k-dated
    id: dated
    plan: free
    rate_limit_per_minute: 30
    rate_limit_burst: 10
    overrides:
      minute: {limit: 1000, expires: "2026-12-31"}
)");
  ASSERT_TRUE(c.ok()) << c.error();
  auto built = Policy::Build(*c);
  ASSERT_TRUE(built.ok()) << built.error();
  const auto& p = *built;
  const core::Instant now =
      core::Instant::FromUnixSeconds(core::DaysFromCivil({2026, 6, 1}) * 86'400);
  const core::Instant later =
      core::Instant::FromUnixSeconds(core::DaysFromCivil({2027, 1, 1}) * 86'400);
  const core::Limit& minute = p->FindById("cols")->LimitAt(1, now);
  EXPECT_EQ(minute.algorithm(), core::Algorithm::kSlidingWindowLog);
  EXPECT_EQ(minute.PolicyQuota(), 40);
  EXPECT_EQ(minute.PolicyWindowSeconds(now), 60);
  EXPECT_EQ(p->FindById("cols")->LimitAt(1, later).PolicyQuota(), 40);  // no expiry
  EXPECT_EQ(p->FindById("cols")->LimitAt(0, now).PolicyQuota(), 20);    // other limits stay
  EXPECT_EQ(p->FindById("none")->LimitAt(1, now).PolicyQuota(), 60);    // the plan's default
  EXPECT_EQ(p->FindById("gold")->plan->name, "free");                   // strictest, as it is
  EXPECT_EQ(p->FindById("gold")->LimitAt(1, now).PolicyQuota(), 60);
  // A dated override wins while it lasts; then the key's columns apply.
  EXPECT_EQ(p->FindById("dated")->LimitAt(1, now).PolicyQuota(), 1000);
  EXPECT_EQ(p->FindById("dated")->LimitAt(1, later).PolicyQuota(), 40);

  // Keys built by hand are checked too: never an assert on data that came from outside.
  config::Config bad = *c;
  bad.keys[0].rate_limit_per_minute = -1;
  EXPECT_EQ(Policy::Build(bad).error(), "keys.cols.rate_limit_per_minute: must be >= 1, got -1");
}

}  // namespace
}  // namespace tollgate::policy
