// The routes of one configuration, and which of them a request meets. A request must meet the
// route a common upstream would route it to (issue 31), so a folding route (the default) is
// matched by the folded path too (util/path_fold.hpp: case, trailing dots, full-width letters,
// ';' parameters, a format suffix) and the method in any case; of the routes the spellings
// meet, the strictest applies (RouteTable::Match).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <tollgate/config/config.hpp>
#include <tollgate/core/limit.hpp>

namespace tollgate::policy {

// A route's own limit, resolved per plan.
struct RouteLimit {
  std::string check_name;                                   // "<route>:<limit>"
  config::LimitScope scope = config::LimitScope::kDefault;  // kDefault: the caller's identity
  // By Plan::index (the anonymous limits last): that plan's limit, or nullopt: unlimited.
  std::vector<std::optional<core::Limit>> per_plan;
  // Whose mode decides whether it rejects, and whether enforced keys skip it
  // (config::RouteLimitConfig).
  config::RouteLimitConfig::Mode mode = config::RouteLimitConfig::Mode::kCaller;
  bool exempt_enforced_keys = false;
};

struct Route {
  std::string name;
  // How the access log and `tollgate replay` name it: `name`, else its methods and path as
  // written ("GET,HEAD /v1/items/{id}", "/v1/export*"), and "(default)" for the default route
  // (no route matched). Never empty.
  std::string label = "(default)";
  std::vector<RouteLimit> limits;
  // The path pattern as matched (folded when `fold`), and as written; each with its path when
  // it has no {name} segment (the common case), compared as a string.
  config::PathPattern pattern, exact_pattern;
  std::string literal, exact_literal;
  std::vector<std::string> methods;  // empty: any
  config::CostConfig cost;
  config::FailMode fail_mode = config::FailMode::kOpen;
  config::RouteIdentity identity = config::RouteIdentity::kKey;
  // Matched against the folded path, methods in any case (config::RouteConfig::exact_match).
  bool fold = true;
  std::optional<size_t> max_header_bytes;  // config::RouteConfig's; unset: the server's
  std::optional<uint64_t> max_body_bytes;
  // Virtual hosts (config::RouteConfig::hosts): lower-case names, "*.example.com" wildcards;
  // empty: any host.
  std::vector<std::string> hosts;
  size_t upstream = 0;  // the group its requests go to (config::Config::upstreams)
};

// The host of a Host field value (or of an absolute-form target's authority) as routes match
// it: without its port and one trailing dot, its case as sent (matched ignoring case). nullopt
// when it is no plain name: a label empty or of other bytes than letters, digits, '-' and '_'
// (no percent-encoding, no second trailing dot), or a bracketed IPv6 address, which is kept
// whole. Empty for an empty field (HTTP/1.0 without Host).
std::optional<std::string_view> RouteHost(std::string_view field);
// Whether `host` (RouteHost's) is one of `hosts` (a route's), ignoring case.
bool HostMatches(const std::vector<std::string>& hosts, std::string_view host);

// Thread-compatible to build, thread-safe once built (immutable).
class RouteTable {
 public:
  // Appends `route` (file order: the first that matches a spelling is that spelling's route).
  void Add(Route route);

  // The route a request meets: `path` is canonical (util/target.hpp). Three spellings are
  // matched, each by the first route that takes it: the path and method as sent (byte for
  // byte); the folded path with the method in any case (routes with `match: exact` still
  // byte for byte); and the folded path with a format suffix allowed on an exact route's last
  // segment. Exact routes match with one trailing slash too, prefix routes by whole segments,
  // and a GET route matches HEAD. The strictest of the three routes applies (Strictness);
  // on a tie a route that matched before the default route, then the folded spelling's, then
  // the suffixed one's. None: the default route (identity key, cost 1, fail open).
  // `host` (RouteHost's; empty: none): routes with hosts match only when it is one of them.
  const Route& Match(std::string_view method, std::string_view path,
                     std::string_view host = {}) const;

  const std::vector<Route>& routes() const { return routes_; }
  bool has_hosts() const { return any_host_; }  // some route names hosts

 private:
  std::vector<Route> routes_;
  Route default_route_;
  bool any_fold_ = false;  // some route folds
  bool any_host_ = false;  // some route names hosts
  // Every folding route's pattern and methods read alike folded or not: a path and method that
  // need no fold then meet the same route as sent and folded.
  bool fold_invariant_ = true;
};

// How strict a route is, to choose between the routes the spellings of one request meet
// (larger: stricter): limited at all (identity not none), then the fail mode (closed, local,
// open), then having limits of its own, then a cost above 1.
int Strictness(const Route& route);
inline bool Stricter(const Route& a, const Route& b) { return Strictness(a) > Strictness(b); }

}  // namespace tollgate::policy
