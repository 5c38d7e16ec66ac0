#include <tollgate/policy/route_table.hpp>

#include <tollgate/util/ascii.hpp>
#include <tollgate/util/path_fold.hpp>

namespace tollgate::policy {
namespace {

// Which spelling of a request is being matched (RouteTable::Match).
enum class Spelling { kAsSent, kFolded, kFoldedWithSuffix };

bool PathMatches(const config::PathPattern& pattern, std::string_view literal,
                 std::string_view path, bool format_suffix) {
  if (pattern.templated) return pattern.Matches(path, format_suffix);
  // `path` is canonical (util/target.hpp): no empty or dot segments. An exact route matches
  // with or without one trailing slash; a prefix route matches its own path and anything
  // below it, never a longer segment ("/public" is not a prefix of "/publicity").
  if (path.substr(0, literal.size()) != literal) return false;
  std::string_view rest = path.substr(literal.size());
  if (rest.empty() || rest == "/") return true;
  if (pattern.prefix && rest.front() == '/') return true;
  // A format suffix on the last segment ("/v1/export.csv"): Rails routes "(.:format)" to the
  // same action, and Spring's suffix match did by default.
  if (!format_suffix) return false;
  if (rest.back() == '/') rest.remove_suffix(1);
  return util::IsFormatSuffix(rest);
}

bool MethodMatches(const Route& r, std::string_view method, bool any_case) {
  // Methods are case-sensitive (RFC 9110 9.1), but some upstreams upper-case them before
  // routing (Werkzeug: "post" runs a POST handler). HEAD is GET without the body, and costs and
  // limits what GET does.
  if (r.methods.empty()) return true;
  for (const std::string& m : r.methods) {
    if (any_case ? util::EqualsIgnoreCase(m, method) ||
                       (util::EqualsIgnoreCase(method, "HEAD") && m == "GET")
                 : m == method || (method == "HEAD" && m == "GET")) {
      return true;
    }
  }
  return false;
}

bool Matches(const Route& r, Spelling spelling, std::string_view method, std::string_view path,
             std::string_view folded, std::string_view host) {
  if (!r.hosts.empty() && !HostMatches(r.hosts, host)) return false;
  if (spelling == Spelling::kAsSent || !r.fold) {
    return MethodMatches(r, method, false) &&
           PathMatches(r.exact_pattern, r.exact_literal, path, false);
  }
  return MethodMatches(r, method, true) &&
         PathMatches(r.pattern, r.literal, folded, spelling == Spelling::kFoldedWithSuffix);
}

bool HasLowerCase(std::string_view s) {
  for (const char c : s) {
    if (c >= 'a' && c <= 'z') return true;
  }
  return false;
}

// Whether the last segment of `path` holds a '.' (a format suffix is possible).
bool LastSegmentHasDot(std::string_view path) {
  if (!path.empty() && path.back() == '/') path.remove_suffix(1);
  const size_t slash = path.rfind('/');
  return path.find('.', slash == std::string_view::npos ? 0 : slash) != std::string_view::npos;
}

}  // namespace

std::optional<std::string_view> RouteHost(std::string_view field) {
  if (field.empty()) return field;
  if (field.front() == '[') {
    const size_t close = field.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    const std::string_view rest = field.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return std::nullopt;
    return field.substr(0, close + 1);
  }
  std::string_view name = field.substr(0, field.find(':'));
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  // Labels of letters, digits, '-' and '_', none empty: a spelling no upstream reads as
  // another name ("api.example.com.." and "api%2eexample.com" are refused).
  bool label_empty = true;
  for (const char c : name) {
    if (c == '.') {
      if (label_empty) return std::nullopt;
      label_empty = true;
      continue;
    }
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && c != '-' && c != '_') return std::nullopt;
    label_empty = false;
  }
  if (label_empty) return std::nullopt;
  return name;
}

bool HostMatches(const std::vector<std::string>& hosts, std::string_view host) {
  if (host.empty()) return false;
  for (const std::string& h : hosts) {
    if (h.starts_with("*.")) {
      // Any name below it, never the name itself: "*.example.com" takes "a.b.example.com".
      const std::string_view suffix = std::string_view(h).substr(1);
      if (host.size() > suffix.size() &&
          util::EqualsIgnoreCase(host.substr(host.size() - suffix.size()), suffix)) {
        return true;
      }
    } else if (util::EqualsIgnoreCase(host, h)) {
      return true;
    }
  }
  return false;
}

int Strictness(const Route& r) {
  const int fail = r.fail_mode == config::FailMode::kClosed  ? 2
                   : r.fail_mode == config::FailMode::kLocal ? 1
                                                             : 0;
  const bool costed = !r.cost.query.empty() || r.cost.fixed > 1;
  return (r.identity != config::RouteIdentity::kNone) << 4 | fail << 2 |
         int{!r.limits.empty()} << 1 | int{costed};
}

void RouteTable::Add(Route route) {
  any_host_ = any_host_ || !route.hosts.empty();
  if (route.fold) {
    any_fold_ = true;
    fold_invariant_ = fold_invariant_ && route.literal == route.exact_literal &&
                      route.pattern.segments.size() == route.exact_pattern.segments.size();
    for (size_t i = 0; fold_invariant_ && i < route.pattern.segments.size(); ++i) {
      fold_invariant_ =
          route.pattern.segments[i].literal == route.exact_pattern.segments[i].literal;
    }
  }
  routes_.push_back(std::move(route));
}

const Route& RouteTable::Match(std::string_view method, std::string_view path,
                               std::string_view host) const {
  const Route* as_sent = nullptr;
  if (!any_fold_) {
    for (const Route& r : routes_) {
      if (Matches(r, Spelling::kAsSent, method, path, path, host)) return r;
    }
    return default_route_;
  }
  // The folded form is made once per request, and only for a path that can fold.
  std::string_view folded = path;
  if (util::PathNeedsFold(path)) {
    thread_local std::string buffer;
    util::FoldPath(path, buffer);
    folded = buffer;
  }
  // Sent as its fold (the common case): the folded spelling meets the route the sent one does.
  const bool same = folded.data() == path.data() && fold_invariant_ && !HasLowerCase(method);
  const bool suffix = LastSegmentHasDot(folded);
  const Route* fold = nullptr;
  const Route* suffixed = nullptr;
  for (const Route& r : routes_) {
    if (!as_sent && Matches(r, Spelling::kAsSent, method, path, folded, host)) as_sent = &r;
    if (!same && !fold && Matches(r, Spelling::kFolded, method, path, folded, host)) fold = &r;
    if (suffix && !suffixed &&
        Matches(r, Spelling::kFoldedWithSuffix, method, path, folded, host)) {
      suffixed = &r;
    }
    if (as_sent && (same || fold) && (!suffix || suffixed)) break;
  }
  if (!as_sent) as_sent = &default_route_;
  if (same) fold = as_sent;
  if (!fold) fold = &default_route_;
  // Of equally strict routes, one that matched beats the default route (no match at all).
  auto rank = [this](const Route* r) { return Strictness(*r) << 1 | int{r != &default_route_}; };
  const Route* best = fold;
  if (suffixed && rank(suffixed) > rank(best)) best = suffixed;
  if (rank(as_sent) > rank(best)) best = as_sent;
  return *best;
}

}  // namespace tollgate::policy
