// Issue 33: upstream groups in the loader (the default group, named groups, routes naming them,
// virtual hosts) and the routes a host meets.
#include <tollgate/config/config.hpp>

#include <gtest/gtest.h>

#include <string>

#include <tollgate/policy/policy.hpp>

namespace tollgate::config {
namespace {

const std::string kPlans =
    "plans: {free: {limits: [{name: b, capacity: 5, refill_per_second: 1}]}}\n";

std::string ErrorOf(const std::string& yaml) {
  auto c = ParseConfig(kPlans + yaml);
  return c.ok() ? "" : c.error();
}

TEST(UpstreamGroups, TheUpstreamSectionIsTheDefaultGroupNeverEjected) {
  auto c = ParseConfig(kPlans + "upstream: {url: 'http://127.0.0.1:9000/api', timeout_ms: 7}\n");
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_EQ(c->upstreams.size(), 1u);
  EXPECT_EQ(c->upstreams[0].name, "default");
  ASSERT_EQ(c->upstreams[0].endpoints.size(), 1u);
  EXPECT_EQ(c->upstreams[0].endpoints[0].url, "http://127.0.0.1:9000/api");
  EXPECT_EQ(c->upstreams[0].endpoints[0].timeout_ms, 7);
  EXPECT_EQ(c->upstreams[0].passive.consecutive_failures, 0);
}

TEST(UpstreamGroups, NamedGroupsCarryTheirSettingsToEachEndpoint) {
  auto c = ParseConfig(kPlans + R"(
upstreams:
  api:
    endpoints: [http://127.0.0.1:9001, 'https://127.0.0.1:9002']
    balance: least_outstanding
    timeout_ms: 1234
    tls: {verify: false}
    active_health: {path: /healthz, interval_ms: 1000, timeout_ms: 200}
routes:
  - {path: /v1/*, upstream: api, host: [API.Example.com., '*.api.example.com']}
  - {path: /*}
)");
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_EQ(c->upstreams.size(), 2u);
  const UpstreamGroupConfig& g = c->upstreams[1];
  EXPECT_EQ(g.name, "api");
  EXPECT_EQ(g.balance, Balance::kLeastOutstanding);
  EXPECT_EQ(g.passive.consecutive_failures, 5);  // on by default in a group
  for (const UpstreamConfig& e : g.endpoints) {
    EXPECT_EQ(e.timeout_ms, 1234);
    EXPECT_FALSE(e.tls.verify);
  }
  EXPECT_EQ(g.active.path, "/healthz");
  EXPECT_EQ(c->routes[0].upstream_index, 1u);
  EXPECT_EQ(c->routes[0].hosts, (std::vector<std::string>{"api.example.com", "*.api.example.com"}));
  EXPECT_EQ(c->routes[1].upstream_index, 0u);
}

TEST(UpstreamGroups, Http2IsPerUpstreamAndCarriedToEachEndpoint) {
  auto c = ParseConfig(kPlans + R"(
upstream: {url: 'http://127.0.0.1:9000', http2: true}
upstreams: {grpc: {endpoints: [http://127.0.0.1:9001, 'https://127.0.0.1:9002'], http2: true},
            rest: {endpoints: [http://127.0.0.1:9003]}}
)");
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_EQ(c->upstreams.size(), 3u);
  EXPECT_TRUE(c->upstreams[0].endpoints[0].http2);
  for (const UpstreamConfig& e : c->upstreams[1].endpoints) EXPECT_TRUE(e.http2) << e.url;
  EXPECT_FALSE(c->upstreams[2].endpoints[0].http2);
  EXPECT_NE(ErrorOf("upstream: {http2: maybe}").find("upstream.http2"), std::string::npos)
      << ErrorOf("upstream: {http2: maybe}");
}

TEST(UpstreamGroups, UpstreamsDefaultReplacesTheUpstreamSection) {
  auto c = ParseConfig(kPlans + "upstreams: {default: {endpoints: [http://127.0.0.1:9001]}}\n");
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_EQ(c->upstreams.size(), 1u);
  EXPECT_EQ(c->upstreams[0].passive.consecutive_failures, 5);
  EXPECT_EQ(c->upstream.url, "http://127.0.0.1:9001");
}

TEST(UpstreamGroups, RefusalsNameTheField) {
  const struct {
    const char* yaml;
    const char* error;
  } cases[] = {
      {"upstream: {url: http://a:1}\nupstreams: {default: {endpoints: [http://b:1]}}",
       "upstreams.default: the upstream section is the default group already"},
      {"upstreams: {api: {}}", "upstreams.api.endpoints: required"},
      {"upstreams: {api: {endpoints: []}}", "upstreams.api.endpoints: must be a list of 1 to 64"},
      {"upstreams: {api: {endpoints: [http://a:99999]}}",
       "upstreams.api.endpoints[0]: the port must be a number from 1 to 65535"},
      {"upstreams: {api: {endpoints: [http://a:1/x, http://b:1/y]}}",
       "upstreams.api.endpoints[1]: every endpoint of a group has the same base path"},
      {"upstreams: {api: {endpoints: [http://a:1], tls: {verify: false}}}",
       "upstreams.api.tls: needs an https:// endpoint"},
      {"upstreams: {api: {endpoints: [http://a:1], url: http://b:1}}",
       "upstreams.api.url: unknown field"},
      {"upstreams: {'a b': {endpoints: [http://a:1]}}", "upstreams.a b: a group name is a plain"},
      {"upstreams: {api: {endpoints: [http://a:1], passive_health: {base_ejection_ms: 5000, "
       "max_ejection_ms: 100}}}",
       "upstreams.api.passive_health.max_ejection_ms: must be >= base_ejection_ms"},
      {"upstreams: {api: {endpoints: [http://a:1], active_health: {path: healthz}}}",
       "upstreams.api.active_health.path: must start with /"},
      {"upstreams: {api: {endpoints: [http://a:1], active_health: {path: /h, interval_ms: 500, "
       "timeout_ms: 500}}}",
       "upstreams.api.active_health.timeout_ms: must be below interval_ms"},
      {"routes: [{path: /x, upstream: api}]", "routes[0].upstream: no upstream group 'api'"},
      {"routes: [{path: /x, host: '*'}]", "routes[0].host: must be a host name"},
      {"routes: [{path: /x, host: 'a..b'}]", "routes[0].host: must be a host name"},
      {"routes: [{path: /x, host: []}]", "routes[0].host: must name at least one host"},
      {"routes: [{path: /x, host: [a.b, A.B.]}]", "routes[0].host[1]: 'a.b' is listed twice"},
  };
  for (const auto& c : cases) {
    EXPECT_NE(ErrorOf(c.yaml).find(c.error), std::string::npos)
        << c.yaml << "\n  got: " << ErrorOf(c.yaml);
  }
}

TEST(UpstreamGroups, HostRoutesAfterAnyHostRouteOfTheirPathAreUnreachable) {
  auto c = ParseConfig(kPlans + R"(
routes:
  - {path: /a/*, host: '*.example.com'}
  - {path: /a/b, host: x.example.com}
  - {path: /a/c, host: example.com}
  - {path: /b/*}
  - {path: /b/c, host: x.test}
)");
  ASSERT_TRUE(c.ok()) << c.error();
  const auto warnings = UnreachableRoutes(c->routes);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("routes[1]"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("routes[4]"), std::string::npos) << warnings[1];
}

TEST(RouteHost, SpellingsOfOneNameMeetItsRoutesAndOthersAreRefused) {
  using policy::RouteHost;
  EXPECT_EQ(RouteHost("API.example.com:8080"), "API.example.com");
  EXPECT_EQ(RouteHost("api.example.com."), "api.example.com");
  EXPECT_EQ(RouteHost("api.example.com.:1"), "api.example.com");
  EXPECT_EQ(RouteHost("[::1]:80"), "[::1]");
  EXPECT_EQ(RouteHost(""), "");
  for (const char* bad :
       {"api.example.com..", "api%2eexample.com", ".api", "a..b", ":80", "a b", "a!b", "[::1"}) {
    EXPECT_EQ(RouteHost(bad), std::nullopt) << bad;
  }
  const std::vector<std::string> hosts = {"api.example.com", "*.static.test"};
  EXPECT_TRUE(policy::HostMatches(hosts, "API.EXAMPLE.COM"));
  EXPECT_TRUE(policy::HostMatches(hosts, "a.b.Static.test"));
  EXPECT_FALSE(policy::HostMatches(hosts, "static.test"));
  EXPECT_FALSE(policy::HostMatches(hosts, "xstatic.test"));
  EXPECT_FALSE(policy::HostMatches(hosts, "evilapi.example.com"));
  EXPECT_FALSE(policy::HostMatches(hosts, ""));
}

TEST(RouteHost, HostRoutesMatchTheirHostsAndTheGroupFollowsTheRoute) {
  auto c = ParseConfig(kPlans + R"(
upstreams: {api: {endpoints: [http://127.0.0.1:9001]}}
routes:
  - {name: api, path: /v1/*, host: api.example.com, upstream: api}
  - {name: any, path: /v1/*, identity: none}
)");
  ASSERT_TRUE(c.ok()) << c.error();
  auto p = policy::Policy::Build(std::move(c).value());
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_TRUE((*p)->HasHostRoutes());
  EXPECT_EQ((*p)->Match("GET", "/v1/x", "Api.Example.Com").name, "api");
  EXPECT_EQ((*p)->Match("GET", "/v1/x", "Api.Example.Com").upstream, 1u);
  EXPECT_EQ((*p)->Match("GET", "/v1/x", "other").name, "any");
  EXPECT_EQ((*p)->Match("GET", "/v1/x", "other").upstream, 0u);
  EXPECT_EQ((*p)->Match("GET", "/v1/x").name, "any");
  EXPECT_EQ((*p)->Match("GET", "/V1/X", "api.example.com").name, "api");  // folded too
}

}  // namespace
}  // namespace tollgate::config
