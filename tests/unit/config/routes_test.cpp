// Route patterns (issue 20): exact paths, segment prefixes, {name} templates, method lists, and
// the routes check-config reports as unreachable.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <tollgate/config/config.hpp>

namespace tollgate::config {
namespace {

TEST(PathPattern, MatchesCanonicalPathsBySegment) {
  struct Case {
    const char* pattern;
    const char* path;
    bool match;
  };
  const Case cases[] = {
      {"/v1/users/{id}/messages", "/v1/users/42/messages", true},
      {"/v1/users/{id}/messages", "/v1/users/42/messages/", true},
      {"/v1/users/{id}/messages", "/v1/users/42/messages/7", false},
      {"/v1/users/{id}/messages", "/v1/users/messages", false},
      {"/v1/users/{id}/messages", "/v1/users//messages", false},
      {"/v1/users/{id}/messages", "/v1/users/42/43/messages", false},
      {"/v1/users/{id}/messages", "/v1/users/42/messagesX", false},
      {"/v1/users/{id}/messages", "/v1/Users/42/messages", false},  // case-sensitive
      {"/v1/users/{id}", "/v1/users/a%20b", true},                  // one encoded segment
      {"/v1/users/{id}/*", "/v1/users/42/a/b", true},
      {"/v1/users/{id}/*", "/v1/users/42", true},
      {"/v1/users/{id}/*", "/v1/users", false},
      {"/{tenant}/items", "/acme/items", true},
      {"/{tenant}/items", "/items", false},
      {"/public/*", "/public", true},
      {"/public/*", "/public/a/b", true},
      {"/public/*", "/publicity", false},
      {"/login", "/login/", true},
      {"/login", "/login/x", false},
      {"/", "/", true},
      {"/", "/x", false},
      {"/*", "/anything/at/all", true},
  };
  for (const Case& c : cases) {
    auto p = PathPattern::Parse(c.pattern);
    ASSERT_TRUE(p.ok()) << c.pattern << ": " << p.error();
    EXPECT_EQ(p->Matches(c.path), c.match) << c.pattern << " vs " << c.path;
  }
}

TEST(PathPattern, RefusesWhatCanNeverBeMeant) {
  const char* bad[] = {
      "v1/items", "",          "/v1/{a}{b}",    "/v1/x{id}", "/v1/{id}x",
      "/v1/{}",   "/v1/{a-b}", "/v1/{id}/{id}", "/v1/*/x",   "/v1//x",
      "/v1/{id",  "/v1/id}",   "/v1/{ {a} }",   "/v1/**",
  };
  for (const char* p : bad) EXPECT_FALSE(PathPattern::Parse(p).ok()) << p;
}

TEST(PathPattern, BadPatternIsRefusedNamingTheField) {
  auto c = ParseConfig(
      "plans:\n  free: {unlimited: true}\nroutes:\n  - {path: /ok}\n"
      "  - {path: \"/v1/{a}{b}/x\"}\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("routes[1].path"), std::string::npos) << c.error();
  EXPECT_NE(c.error().find("two wildcards in one segment"), std::string::npos) << c.error();
}

std::vector<std::string> Unreachable(const std::string& routes) {
  auto c = ParseConfig("plans:\n  free: {unlimited: true}\nroutes:\n" + routes);
  EXPECT_TRUE(c.ok()) << c.error();
  return c.ok() ? UnreachableRoutes(c->routes) : std::vector<std::string>{};
}

TEST(UnreachableRoutes, NamesEachRouteAnEarlierOneShadows) {
  struct Case {
    const char* routes;
    size_t unreachable;
  };
  const Case cases[] = {
      {"  - {path: /v1/*}\n  - {path: /v1/items}\n", 1},
      {"  - {path: /v1/*, method: GET}\n  - {path: /v1/items}\n", 0},  // POST still reaches it
      {"  - {path: /v1/*, method: [GET, POST]}\n  - {path: /v1/items, method: POST}\n", 1},
      {"  - {path: /v1/*, method: GET}\n  - {path: /v1/items, method: HEAD}\n", 1},
      {"  - {path: \"/v1/users/{id}\"}\n  - {path: /v1/users/me}\n", 1},
      {"  - {path: /v1/users/me}\n  - {path: \"/v1/users/{id}\"}\n", 0},
      {"  - {path: /v1/items}\n  - {path: /v1/items/*}\n", 0},  // the prefix reaches below
      {"  - {path: /v1/items/*}\n  - {path: /v1/items/}\n", 1},
      {"  - {path: /v1/items}\n  - {path: /v1/items, method: GET}\n", 1},
      {"  - {path: \"/{t}/*\"}\n  - {path: \"/a/{u}/c\"}\n", 1},
  };
  for (const Case& c : cases) {
    const auto found = Unreachable(c.routes);
    EXPECT_EQ(found.size(), c.unreachable) << c.routes;
  }
  const auto named =
      Unreachable("  - {name: all, path: /v1/*}\n  - {name: items, path: /v1/items}\n");
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0],
            "routes[1] 'items' (/v1/items) can never match: routes[0] 'all' (/v1/*) comes first");
}

TEST(Routes, MethodListsAndNames) {
  auto c = ParseConfig(
      "plans:\n  free: {unlimited: true}\nroutes:\n"
      "  - {name: write, path: /v1/items, method: [POST, PUT]}\n"
      "  - {name: read, path: /v1/items, method: GET}\n");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->routes[0].methods, (std::vector<std::string>{"POST", "PUT"}));
  EXPECT_EQ(c->routes[1].methods, (std::vector<std::string>{"GET"}));
  for (const char* bad :
       {"  - {path: /a, method: []}\n", "  - {path: /a, method: [GET, \"B A D\"]}\n",
        "  - {name: x, path: /a}\n  - {name: x, path: /b}\n"}) {
    EXPECT_FALSE(
        ParseConfig(std::string("plans:\n  free: {unlimited: true}\nroutes:\n") + bad).ok())
        << bad;
  }
}

}  // namespace
}  // namespace tollgate::config
