// libtollgate's Limiter: the gateway's answers, without HTTP (docs/http-contract.md).
#include <tollgate/tollgate.hpp>

#include <string>

#include <gtest/gtest.h>

namespace tollgate {
namespace {

std::unique_ptr<Limiter> Make() {
  auto l = Limiter::FromYaml(R"(
plans:
  free:
    limits:
      - {name: burst, capacity: 3, refill_per_second: 0.5}
  trial:
    mode: shadow
    limits:
      - {name: burst, capacity: 1, refill_per_second: 0.5}
anonymous:
  limits:
    - {name: burst, capacity: 2, refill_per_second: 0.5}
keys:
  - {key: k-free, id: free-1, plan: free}
  - {key: k-trial, id: trial-1, plan: trial}
routes:
  - {path: /v1/export, method: GET, cost: {query: pages, per: 50, min: 1}}
  - {path: /public/*, identity: ip}
  - {path: /health/*, identity: none}
)");
  EXPECT_TRUE(l.ok()) << l.error();
  return std::move(l).value();
}

std::string Header(const Answer& a, const std::string& name) {
  for (const auto& [n, v] : a.headers) {
    if (n == name) return v;
  }
  return "";
}

TEST(Limiter, AllowsUpToTheBurstThenRejectsWithRetryAfterAndHeaders) {
  auto l = Make();
  for (int i = 0; i < 3; ++i) {
    const Answer a = l->Check({.api_key = "k-free", .path = "/v1/things"});
    EXPECT_TRUE(a.allowed) << i;
    EXPECT_EQ(a.key_id, "free-1");
    EXPECT_EQ(Header(a, "RateLimit-Remaining"), std::to_string(2 - i));
  }
  const Answer a = l->Check({.api_key = "k-free", .path = "/v1/things"});
  EXPECT_FALSE(a.allowed);
  EXPECT_EQ(a.status, 429);
  EXPECT_EQ(a.code, "rate_limited");
  EXPECT_EQ(Header(a, "Retry-After"), "2");
  EXPECT_EQ(Header(a, "RateLimit-Remaining"), "0");
  EXPECT_NE(a.body.find("\"rate_limited\""), std::string::npos) << a.body;
}

TEST(Limiter, AMissingOrUnknownKeyIs401WithWwwAuthenticate) {
  auto l = Make();
  const Answer missing = l->Check({.path = "/v1/things", .client_address = "192.0.2.7"});
  EXPECT_EQ(missing.status, 401);
  EXPECT_EQ(missing.code, "missing_api_key");
  EXPECT_EQ(Header(missing, "WWW-Authenticate"), "Bearer");
  const Answer unknown =
      l->Check({.api_key = "nope", .path = "/v1/things", .client_address = "192.0.2.7"});
  EXPECT_EQ(unknown.status, 401);
  EXPECT_EQ(unknown.code, "invalid_api_key");
  EXPECT_EQ(Header(unknown, "WWW-Authenticate"), "Bearer");
  EXPECT_EQ(unknown.key_id, "");
}

TEST(Limiter, RouteCostsAreReadFromTheQueryAndABadOneIs400) {
  auto l = Make();
  const Answer big = l->Check({.api_key = "k-free", .path = "/v1/export?pages=120"});  // cost 3
  EXPECT_TRUE(big.allowed);
  EXPECT_EQ(Header(big, "RateLimit-Remaining"), "0");
  const Answer bad = l->Check({.api_key = "k-free", .path = "/v1/export?pages=abc"});
  EXPECT_FALSE(bad.allowed);
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.code, "invalid_cost");
  EXPECT_EQ(bad.key_id, "free-1");
}

TEST(Limiter, AddressRoutesLimitPerClientAndOpenRoutesNotAtAll) {
  auto l = Make();
  for (int i = 0; i < 2; ++i)
    EXPECT_TRUE(l->Check({.path = "/public/a", .client_address = "192.0.2.7"}).allowed);
  EXPECT_EQ(l->Check({.path = "/public/a", .client_address = "192.0.2.7"}).status, 429);
  EXPECT_TRUE(l->Check({.path = "/public/a", .client_address = "192.0.2.8"}).allowed);
  for (int i = 0; i < 5; ++i) {
    const Answer open = l->Check({.path = "/health/live"});
    EXPECT_TRUE(open.allowed);
    EXPECT_TRUE(open.headers.empty());
  }
}

// Issue 19 (a drifted copy of the answer mapping): libtollgate routed on the raw path, so an
// embedding service whose router resolves dot segments was limited on another route than it
// served.
TEST(Limiter, ThePathIsMadeCanonicalAsTheGatewayMakesIt) {
  auto l = Make();
  for (const char* path :
       {"/public/../v1/items", "/public/%2e%2e/v1/items", "/health/./../v1/items"}) {
    const Answer a = l->Check({.method = "GET", .path = path, .client_address = "198.51.100.9"});
    EXPECT_EQ(a.status, 401) << path;
    EXPECT_EQ(a.code, "missing_api_key") << path;
  }
  const Answer bad = l->Check({.method = "GET", .path = "/public/..%2fv1/items"});
  EXPECT_FALSE(bad.allowed);
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.code, "invalid_request_target");
  // The cost reads the decoded parameter, the largest of a repeated one: 5000 pages cost 100,
  // more than the burst of 3.
  const Answer costly =
      l->Check({.api_key = "k-free", .path = "/v1//export/?pag%65s=1&pages=5000"});
  EXPECT_EQ(costly.status, 429);
  EXPECT_EQ(costly.code, "cost_exceeds_capacity");
}

TEST(Limiter, AShadowPlanRejectsNothingAndSendsNoHeadersUntilEnforced) {
  auto l = Make();
  for (int i = 0; i < 4; ++i) {
    const Answer a = l->Check({.api_key = "k-trial", .path = "/v1/things"});
    EXPECT_TRUE(a.allowed) << i;
    EXPECT_TRUE(a.headers.empty()) << i;
  }
}

}  // namespace
}  // namespace tollgate

namespace tollgate {
namespace {

// Issue 32 part 1: libtollgate honours the configured deny list, as the gateway does (403,
// "blocked"), and consumes nothing for a denied request.
TEST(LimiterDenyList, ConfiguredDenyListRefusesKeysAccountsAndAddresses) {
  auto l = Limiter::FromYaml(R"(
plans:
  free:
    limits:
      - {name: burst, capacity: 3, refill_per_second: 0.5}
anonymous:
  limits:
    - {name: burst, capacity: 2, refill_per_second: 0.5}
keys:
  - {key: k-bad, id: bad-1, plan: free}
  - {key: k-acct, id: acct-1, account: shady, plan: free}
  - {key: k-good, id: good-1, plan: free}
routes:
  - {path: /public/*, identity: ip}
deny:
  keys: [bad-1]
  accounts: [shady]
  addresses: [203.0.113.0/24]
)");
  ASSERT_TRUE(l.ok()) << l.error();
  Limiter& lim = **l;
  struct Case {
    const char* key;
    const char* path;
    const char* client;
    int status;
  } cases[] = {
      {"k-bad", "/v1/x", "10.0.0.1", 403},     {"k-acct", "/v1/x", "10.0.0.1", 403},
      {"k-good", "/v1/x", "203.0.113.9", 403}, {"", "/public/a", "203.0.113.9", 403},
      {"k-good", "/v1/x", "10.0.0.1", 200},    {"", "/public/a", "10.0.0.2", 200},
  };
  for (const Case& c : cases) {
    const Answer a = lim.Check({.api_key = c.key, .path = c.path, .client_address = c.client});
    EXPECT_EQ(a.status, c.status) << c.key << " " << c.path << " " << c.client;
    if (c.status == 403) {
      EXPECT_FALSE(a.allowed);
      EXPECT_EQ(a.code, "blocked");
    }
  }
  // Denied every time, never turning 429: a denied request consumes nothing.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(lim.Check({.api_key = "k-bad", .path = "/v1/x"}).status, 403);
  }
}

}  // namespace
}  // namespace tollgate
