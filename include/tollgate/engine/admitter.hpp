// One admission for every adapter (issue 32, part 1): who a request is, which route applies
// (the strictest its method and its overrides meet), what it costs, its checks and scopes, and
// whether the deny list refuses it. The gateway, the decision listener, explain, admin reset,
// the RLS domains, libtollgate and replay all describe their request and call Admitter::Admit.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include <tollgate/core/time.hpp>
#include <tollgate/engine/checks.hpp>
#include <tollgate/policy/policy.hpp>
#include <tollgate/util/ascii.hpp>
#include <tollgate/util/query.hpp>
#include <tollgate/util/text.hpp>

namespace tollgate::engine {

// The strictest of the routes a request's method and the methods it asks an upstream to run
// instead (issue 31) meet. Overrides are honoured on POST only: the `_method` query parameter
// (Symfony, Laravel) is read here; `header_overrides(fn)` calls fn(method) for each method the
// transport's header fields name (X-HTTP-Method-Override and the like; a transport without
// header fields passes NoOverrideFields). `host`: the request's (policy::RouteHost; empty: none)
// for routes that name hosts. Allocation-free.
struct NoOverrideFields {
  template <class Fn>
  void operator()(Fn&&) const {}
};
// Calls fn(route) for each route the request meets (for `host`, empty: none): its method's
// first, then those of the methods it asks for instead.
template <class HeaderOverrides, class Fn>
void ForEachRouteMet(const policy::Policy& pol, std::string_view method, std::string_view path,
                     std::string_view query, HeaderOverrides&& header_overrides, Fn&& fn,
                     std::string_view host = {}) {
  fn(pol.Match(method, path, host));
  if (!util::EqualsIgnoreCase(method, "POST")) return;
  auto meet = [&](std::string_view m) { fn(pol.Match(m, path, host)); };
  header_overrides(meet);
  if (query.find("_method") != std::string_view::npos) {
    util::ForEachQueryParam(query, [&meet](std::string_view name, std::string_view value, bool) {
      if (name == "_method" && !value.empty()) meet(util::Trim(value));
    });
  }
}
// How strong an identity a route demands: client_cert > key > key_or_ip > ip > none.
inline int IdentityStrength(config::RouteIdentity i) {
  using I = config::RouteIdentity;
  return i == I::kClientCert ? 4 : i == I::kKey ? 3 : i == I::kKeyOrIp ? 2 : i == I::kIp ? 1 : 0;
}

// The smallest size limits of the routes a request meets (max_header_bytes, max_body_bytes).
// Unset: the server's.
struct SizeLimits {
  std::optional<size_t> head_bytes;
  std::optional<uint64_t> body_bytes;
};

// What the routes a request meets demand together, in one pass: the strictest of them (whose
// limits apply), the strongest identity (an override must not walk past a route that demands a
// key or a certificate: the upstream may run the request's own method), and the smallest size
// limits (nor lead to a route that takes larger requests).
struct RoutesMet {
  const policy::Route* strictest = nullptr;
  config::RouteIdentity strongest = config::RouteIdentity::kNone;
  SizeLimits sizes;
};
template <class HeaderOverrides>
RoutesMet MeetRoutes(const policy::Policy& pol, std::string_view method, std::string_view path,
                     std::string_view query, HeaderOverrides&& header_overrides,
                     std::string_view host = {}) {
  RoutesMet m;
  ForEachRouteMet(
      pol, method, path, query, header_overrides,
      [&m](const policy::Route& r) {
        if (!m.strictest || policy::Stricter(r, *m.strictest)) m.strictest = &r;
        if (IdentityStrength(r.identity) > IdentityStrength(m.strongest)) m.strongest = r.identity;
        SizeLimits& s = m.sizes;
        if (r.max_header_bytes)
          s.head_bytes = std::min(*r.max_header_bytes, s.head_bytes.value_or(*r.max_header_bytes));
        if (r.max_body_bytes)
          s.body_bytes = std::min(*r.max_body_bytes, s.body_bytes.value_or(*r.max_body_bytes));
      },
      host);
  return m;
}
template <class HeaderOverrides>
const policy::Route& StrictestRoute(const policy::Policy& pol, std::string_view method,
                                    std::string_view path, std::string_view query,
                                    HeaderOverrides&& header_overrides,
                                    std::string_view host = {}) {
  return *MeetRoutes(pol, method, path, query, header_overrides, host).strictest;
}

// One request as an adapter describes it. Views: they must outlive the admission.
struct AdmitRequest {
  const policy::Route* route = nullptr;  // StrictestRoute(); null: no route (RLS domains: the
                                         // identity's plan limits only)
  bool presented_key = false;            // the request presented a key (any, known or not)
  const policy::Key* key = nullptr;      // what it names (already resolved); null: unknown
  std::string_view client;               // the client address as Policy::ClientAddress gives it
  std::string_view query;                // canonical, without '?': the route's cost reads it
  std::optional<int64_t> fixed_cost;     // given: the cost (the route's is not read)
  core::Instant now;
  bool about_the_key = false;  // the endpoint is about the caller's key (GET /v1/rate-limit):
                               // limited by key whatever the route
  bool key_required = false;   // another route the request meets demands a key
                               // (RoutesMet::strongest): limited by key whatever the route
  const policy::DenyList* runtime_deny = nullptr;  // the adapter's runtime list (admin API)
  // false: a denied request gets no checks (the adapter answers 403, or OVER_LIMIT); true: the
  // verdict is only reported and the checks are written as for any request (explain, reset).
  bool checks_when_denied = false;
};

// What Admit decided: Admission (identity, plan, cost, checks written into the caller's array,
// scopes) with the route and the deny list's verdict.
struct Admitted : Admission {
  const policy::Route* route = nullptr;
  bool keyed = false;   // limited by key (LimitedByKey, or about the key)
  bool denied = false;  // the configured or the runtime deny list refuses it: no checks written
                        // unless AdmitRequest::checks_when_denied
};

// Whether the request needs its key read: a transport reads (and resolves) the presented key
// only then (the hot path skips it on `ip` and `none` routes).
inline bool ReadsKey(const policy::Route* route, bool about_the_key) {
  return about_the_key || !route ||
         (route->identity != config::RouteIdentity::kIp &&
          route->identity != config::RouteIdentity::kNone);
}

// Whether the configured deny list of `pol` or `runtime` (may be null) refuses `key` (null:
// none) from `client`.
inline bool Denied(const policy::Policy& pol, const policy::DenyList* runtime,
                   const policy::Key* key, std::string_view client) {
  return pol.deny().Denies(key, client) || (runtime && runtime->Denies(key, client));
}

// Stateless; thread-safe. Allocation-free but for the scopes' strings, which reuse their
// capacity.
class Admitter {
 public:
  explicit Admitter(const policy::Policy& pol) : pol_(pol) {}
  // Writes the checks into `checks` (at most kMaxChecks) and their scopes into `scopes`.
  Admitted Admit(const AdmitRequest& request, std::span<store::Check> checks, Scopes& scopes) const;

 private:
  const policy::Policy& pol_;
};

}  // namespace tollgate::engine
