#include "config/routes.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include <tollgate/util/path_fold.hpp>

#include "config/limits.hpp"
#include "config/yaml.hpp"

namespace tollgate::config {
namespace {

using internal::Fail;
using internal::Int;
using internal::IsToken;
using internal::Join;
using internal::LimitFields;
using internal::Name;
using internal::OnlyKeys;
using internal::ParseEnum;
using internal::ParseLimit;
using internal::ParseScope;
using internal::ReadLimitFields;
using internal::Set;
using internal::Str;

bool IsParamName(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// The next segment of a canonical path at `pos` (just after a '/'), or nullopt at the end.
std::optional<std::string_view> NextSegment(std::string_view path, size_t& pos) {
  if (pos >= path.size()) return std::nullopt;
  const size_t slash = path.find('/', pos);
  const size_t end = slash == std::string_view::npos ? path.size() : slash;
  const std::string_view segment = path.substr(pos, end - pos);
  pos = end == path.size() ? end : end + 1;
  return segment;
}

bool SegmentCovers(const PathPattern::Segment& earlier, const PathPattern::Segment& later) {
  return !earlier.param.empty() || (later.param.empty() && earlier.literal == later.literal);
}

}  // namespace

std::string_view FailModeName(FailMode mode) {
  switch (mode) {
    case FailMode::kOpen:
      return "open";
    case FailMode::kClosed:
      return "closed";
    case FailMode::kLocal:
      return "local";
  }
  return "open";
}

core::Result<PathPattern> PathPattern::Parse(std::string_view path) {
  if (path.empty() || path[0] != '/') return core::Error{"must start with /"};
  PathPattern p;
  if (path.back() == '*') {
    p.prefix = true;
    path.remove_suffix(1);
  }
  // "/public/" and "/public" name the same segments (an exact route matches either).
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  size_t pos = 1;
  std::set<std::string_view> params;
  while (pos <= path.size()) {
    const size_t slash = path.find('/', pos);
    const size_t end = slash == std::string_view::npos ? path.size() : slash;
    const std::string_view s = path.substr(pos, end - pos);
    if (s.empty()) return core::Error{"empty segment ('//'): a canonical path never has one"};
    if (s.find('*') != std::string_view::npos) return core::Error{"'*' only at the end"};
    const size_t open = s.find('{');
    if (open != std::string_view::npos || s.find('}') != std::string_view::npos) {
      if (s.find('{', open + 1) != std::string_view::npos) {
        return core::Error{"two wildcards in one segment ('" + std::string(s) + "')"};
      }
      if (open != 0 || s.back() != '}' || !IsParamName(s.substr(1, s.size() - 2))) {
        return core::Error{"a wildcard is a whole segment, {name} of letters, digits and _ ('" +
                           std::string(s) + "')"};
      }
      const std::string_view name = s.substr(1, s.size() - 2);
      if (!params.insert(name).second) {
        return core::Error{"wildcard {" + std::string(name) + "} named twice"};
      }
      p.segments.push_back({"", std::string(name)});
      p.templated = true;
    } else {
      p.segments.push_back({std::string(s), ""});
    }
    pos = end + 1;
  }
  return p;
}

core::Result<PathPattern> PathPattern::ParseFolded(std::string_view path) {
  auto written = Parse(path);
  if (!written) return written;
  std::string folded;
  util::FoldPath(path, folded);
  auto p = Parse(folded);
  if (!p) return core::Error{"folded to '" + folded + "': " + p.error()};
  p->folded = true;
  return p;
}

bool PathPattern::Matches(std::string_view path, bool format_suffix) const {
  size_t pos = 1;  // canonical: starts with '/'
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    const auto got = NextSegment(path, pos);
    if (!got || got->empty()) return false;
    if (!s.param.empty() || *got == s.literal) continue;
    // The path's last segment may carry a format suffix ("export.csv").
    const bool last = i + 1 == segments.size() && pos >= path.size();
    if (!format_suffix || !last || !got->starts_with(s.literal) ||
        !util::IsFormatSuffix(got->substr(s.literal.size()))) {
      return false;
    }
  }
  // What is left: nothing or one trailing slash (an exact match), or more segments (a prefix's).
  return pos >= path.size() || prefix;
}

bool PathPattern::CoveredBy(const PathPattern& earlier) const {
  if (earlier.prefix ? earlier.segments.size() > segments.size()
                     : prefix || earlier.segments.size() != segments.size()) {
    return false;
  }
  for (size_t i = 0; i < earlier.segments.size(); ++i) {
    if (!SegmentCovers(earlier.segments[i], segments[i])) return false;
  }
  return true;
}

namespace {

bool MethodsCovered(const std::vector<std::string>& later,
                    const std::vector<std::string>& earlier) {
  if (earlier.empty()) return true;
  if (later.empty()) return false;
  auto has = [&](std::string_view m) {
    return std::find(earlier.begin(), earlier.end(), m) != earlier.end();
  };
  return std::all_of(later.begin(), later.end(), [&](const std::string& m) {
    return has(m) || (m == "HEAD" && has("GET"));  // a GET route takes HEAD too
  });
}

// Whether every host `later` matches is matched by `earlier` (empty: any host).
bool HostsCovered(const std::vector<std::string>& later, const std::vector<std::string>& earlier) {
  if (earlier.empty()) return true;
  if (later.empty()) return false;
  return std::all_of(later.begin(), later.end(), [&](const std::string& h) {
    return std::any_of(earlier.begin(), earlier.end(), [&h](const std::string& e) {
      // "*.example.com" covers "a.example.com" and "*.a.example.com".
      return e == h || (e.starts_with("*.") && h.size() > e.size() - 1 &&
                        h.ends_with(std::string_view(e).substr(1)));
    });
  });
}

std::string Describe(const RouteConfig& r, size_t i) {
  std::string out = "routes[" + std::to_string(i) + "]";
  if (!r.name.empty()) out += " '" + r.name + "'";
  out += " (";
  for (const std::string& m : r.methods) out += m + (&m == &r.methods.back() ? " " : ",");
  out += r.path;
  for (const std::string& h : r.hosts) out += (&h == &r.hosts.front() ? " host " : ",") + h;
  return out + ")";
}

}  // namespace

std::vector<std::string> UnreachableRoutes(const std::vector<RouteConfig>& routes) {
  std::vector<std::string> out;
  for (size_t j = 0; j < routes.size(); ++j) {
    for (size_t i = 0; i < j; ++i) {
      if (!MethodsCovered(routes[j].methods, routes[i].methods) ||
          !HostsCovered(routes[j].hosts, routes[i].hosts) ||
          !routes[j].pattern.CoveredBy(routes[i].pattern)) {
        continue;
      }
      out.push_back(Describe(routes[j], j) + " can never match: " + Describe(routes[i], i) +
                    " comes first");
      break;
    }
  }
  return out;
}

namespace internal {
namespace {

CostConfig ParseCost(const YAML::Node& cost, const std::string& path) {
  CostConfig c;
  if (cost.IsScalar()) {
    c.fixed = Int(cost, Join(path, "cost"), 1, int64_t{1} << 40);
    return c;
  }
  OnlyKeys(cost, Join(path, "cost"), {"query", "per", "min"});
  if (!cost["query"]) Fail(Join(path, "cost.query"), "required");
  c.query = Str(cost["query"], Join(path, "cost.query"));
  Set(cost, "per", Join(path, "cost"), c.per, 1, int64_t{1} << 40);
  Set(cost, "min", Join(path, "cost"), c.min, 1, int64_t{1} << 40);
  return c;
}

std::vector<std::string> ParseMethods(const YAML::Node& n, const std::string& path) {
  std::vector<std::string> methods;
  std::vector<std::string> paths;
  if (n.IsSequence()) {
    if (n.size() == 0) Fail(path, "must name at least one method (omit it for any method)");
    for (size_t i = 0; i < n.size(); ++i) {
      paths.push_back(internal::Index(path, i));
      methods.push_back(Str(n[i], paths.back()));
    }
  } else {
    paths.push_back(path);
    methods.push_back(Str(n, path));
  }
  for (size_t i = 0; i < methods.size(); ++i) {
    const std::string& m = methods[i];
    if (!IsToken(m)) Fail(paths[i], "must be a method name (GET, POST, ...)");
    // Issue 31: methods are case-sensitive (RFC 9110) and clients send them upper-case, so a
    // route of `post` never matched anything.
    if (std::any_of(m.begin(), m.end(), [](char c) { return c >= 'a' && c <= 'z'; })) {
      std::string upper = m;
      for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      Fail(paths[i], "'" + m +
                         "' would never match: methods are upper-case and matched exactly "
                         "(write " +
                         upper + ")");
    }
  }
  return methods;
}

// One plan's value of a route limit: `unlimited`, or the fields that differ from the route
// limit's own (not its algorithm).
std::optional<core::LimitSpec> ParsePlanValue(const YAML::Node& n, const std::string& path,
                                              const core::LimitSpec& base) {
  if (n.IsScalar()) {
    if (Str(n, path) == "unlimited") return std::nullopt;
    Fail(path, "must be unlimited or a map of limit fields");
  }
  std::set<std::string> allowed = LimitFields();
  allowed.erase("name");
  allowed.erase("algorithm");
  OnlyKeys(n, path, allowed);
  core::LimitSpec spec = base;
  ReadLimitFields(n, path, spec);
  return spec;
}

RouteLimitConfig ParseRouteLimit(const YAML::Node& n, const std::string& path,
                                 RouteIdentity identity) {
  RouteLimitConfig rl;
  rl.limit = ParseLimit(n, path, false, {"scope", "plans", "mode", "exempt_enforced_keys"});
  if (const YAML::Node s = n["scope"]) rl.limit.scope = ParseScope(s, Join(path, "scope"));
  const LimitScope scope = rl.limit.scope;
  using Mode = RouteLimitConfig::Mode;
  rl.mode = scope == LimitScope::kIp || scope == LimitScope::kGlobal ||
                    (scope == LimitScope::kDefault && identity == RouteIdentity::kIp)
                ? Mode::kEnforce
                : Mode::kCaller;
  if (const YAML::Node m = n["mode"]) {
    rl.mode = ParseEnum<Mode>(
        m, Join(path, "mode"),
        {{"caller", Mode::kCaller}, {"enforce", Mode::kEnforce}, {"shadow", Mode::kShadow}},
        "caller, enforce or shadow");
  }
  if (const YAML::Node e = n["exempt_enforced_keys"]) {
    rl.exempt_enforced_keys = internal::Bool(e, Join(path, "exempt_enforced_keys"));
    if (rl.exempt_enforced_keys && identity == RouteIdentity::kIp) {
      Fail(Join(path, "exempt_enforced_keys"), "an identity: ip route has no keys to exempt");
    }
  }
  if (identity == RouteIdentity::kIp &&
      (scope == LimitScope::kKey || scope == LimitScope::kAccount)) {
    Fail(Join(path, "scope"), "an identity: ip route has no key or account; use ip or global");
  }
  if (const YAML::Node plans = n["plans"]) {
    internal::RequireMap(plans, Join(path, "plans"));
    for (const auto& kv : plans) {
      const std::string name = kv.first.as<std::string>();
      rl.plans[name] = ParsePlanValue(kv.second, Join(Join(path, "plans"), name), rl.limit.spec);
    }
  }
  return rl;
}

bool IsPlainWord(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

void ParseRouteLimits(const YAML::Node& n, const std::string& path, RouteConfig& rc) {
  const std::string lpath = Join(path, "limits");
  if (!n.IsSequence()) Fail(lpath, "must be a list of limits");
  if (n.size() > 8) Fail(lpath, "at most 8 limits");
  if (n.size() > 0 && rc.name.empty()) Fail(Join(path, "name"), "required with limits");
  if (n.size() > 0 && rc.identity == RouteIdentity::kNone) {
    Fail(lpath, "an identity: none route is not limited; give it another identity");
  }
  std::set<std::string> names;
  for (size_t i = 0; i < n.size(); ++i) {
    rc.limits.push_back(ParseRouteLimit(n[i], Index(lpath, i), rc.identity));
    if (!names.insert(rc.limits.back().limit.name).second) {
      Fail(Join(Index(lpath, i), "name"), "duplicate '" + rc.limits.back().limit.name + "'");
    }
  }
}

// One `host:` entry, lower-cased and without one trailing dot: a name of letters, digits, '-'
// and '_' labels, or "*." and such a name; an IPv4 address fits too. No port (it is ignored).
std::string ParseHost(const YAML::Node& n, const std::string& path) {
  std::string h = Str(n, path);
  for (char& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!h.empty() && h.back() == '.') h.pop_back();
  const std::string_view name = h.starts_with("*.") ? std::string_view(h).substr(2) : h;
  bool ok = !name.empty() && name.front() != '.' && name.back() != '.' &&
            name.find("..") == std::string_view::npos;
  for (const char c : name) {
    ok = ok &&
         ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.');
  }
  if (!ok) {
    Fail(path,
         "must be a host name (api.example.com) or a wildcard (*.example.com), without a "
         "port, got '" +
             Str(n, path) + "'");
  }
  return h;
}

std::vector<std::string> ParseHosts(const YAML::Node& n, const std::string& path) {
  std::vector<std::string> hosts;
  if (!n.IsSequence()) {
    hosts.push_back(ParseHost(n, path));
    return hosts;
  }
  if (n.size() == 0) Fail(path, "must name at least one host (omit it for any host)");
  for (size_t i = 0; i < n.size(); ++i) {
    hosts.push_back(ParseHost(n[i], Index(path, i)));
    if (std::find(hosts.begin(), hosts.end() - 1, hosts.back()) != hosts.end() - 1)
      Fail(Index(path, i), "'" + hosts.back() + "' is listed twice");
  }
  return hosts;
}

RouteConfig ParseRoute(const YAML::Node& r, const std::string& path, bool exact_match) {
  OnlyKeys(r, path,
           {"name", "path", "method", "cost", "fail_mode", "identity", "limits", "match",
            "max_header_bytes", "max_body_bytes", "host", "upstream"});
  RouteConfig rc;
  if (r["max_header_bytes"])
    Set(r, "max_header_bytes", path, rc.max_header_bytes.emplace(), 1, 1 << 20);
  if (r["max_body_bytes"])
    Set(r, "max_body_bytes", path, rc.max_body_bytes.emplace(), 0, int64_t{1} << 40);
  rc.exact_match = exact_match;
  if (const YAML::Node m = r["match"]) {
    rc.exact_match = ParseEnum<bool>(m, Join(path, "match"), {{"fold", false}, {"exact", true}},
                                     "fold or exact");
  }
  if (r["name"]) {
    rc.name = Name(r["name"], Join(path, "name"));
    if (!IsPlainWord(rc.name)) {
      Fail(Join(path, "name"), "must be a plain word (letters, digits, - or _)");
    }
  }
  if (!r["path"]) Fail(Join(path, "path"), "required");
  rc.path = Name(r["path"], Join(path, "path"));
  auto pattern = rc.exact_match ? PathPattern::Parse(rc.path) : PathPattern::ParseFolded(rc.path);
  if (!pattern) Fail(Join(path, "path"), pattern.error());
  rc.pattern = *std::move(pattern);
  if (r["method"]) rc.methods = ParseMethods(r["method"], Join(path, "method"));
  if (const YAML::Node cost = r["cost"]) rc.cost = ParseCost(cost, path);
  if (const YAML::Node f = r["fail_mode"]) {
    rc.fail_mode = ParseEnum<FailMode>(
        f, Join(path, "fail_mode"),
        {{"open", FailMode::kOpen}, {"closed", FailMode::kClosed}, {"local", FailMode::kLocal}},
        "open, closed or local");
  }
  if (const YAML::Node id = r["identity"]) {
    rc.identity = ParseEnum<RouteIdentity>(id, Join(path, "identity"),
                                           {{"key", RouteIdentity::kKey},
                                            {"ip", RouteIdentity::kIp},
                                            {"key_or_ip", RouteIdentity::kKeyOrIp},
                                            {"none", RouteIdentity::kNone},
                                            {"client_cert", RouteIdentity::kClientCert}},
                                           "key, ip, key_or_ip, none or client_cert");
  }
  if (const YAML::Node limits = r["limits"]) ParseRouteLimits(limits, path, rc);
  if (const YAML::Node h = r["host"]) rc.hosts = ParseHosts(h, Join(path, "host"));
  if (const YAML::Node u = r["upstream"]) rc.upstream = Name(u, Join(path, "upstream"));
  return rc;
}

}  // namespace

std::vector<RouteConfig> ParseRoutes(const YAML::Node& routes, bool exact_match) {
  if (!routes.IsSequence()) Fail("routes", "must be a list");
  std::vector<RouteConfig> out;
  std::set<std::string> names;
  for (size_t i = 0; i < routes.size(); ++i) {
    out.push_back(ParseRoute(routes[i], Index("routes", i), exact_match));
    const std::string& name = out.back().name;
    if (!name.empty() && !names.insert(name).second) {
      Fail(Join(Index("routes", i), "name"), "'" + name + "' names an earlier route too");
    }
  }
  return out;
}

}  // namespace internal
}  // namespace tollgate::config
