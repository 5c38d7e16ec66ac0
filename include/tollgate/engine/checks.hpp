// The checks of one request: a plan's limits, with a key's overrides, as store checks.
#pragma once

#include <optional>
#include <span>
#include <string>

#include <tollgate/core/time.hpp>
#include <tollgate/engine/engine.hpp>
#include <tollgate/policy/policy.hpp>
#include <tollgate/store/store.hpp>

namespace tollgate::engine {

// The most checks one request makes (a plan has at most 8 limits; room for the route's and
// the identity's own). Every adapter's per-request arrays are this size.
inline constexpr size_t kMaxChecks = 16;

// The engine's fail mode for a route's `fail_mode`.
inline FailMode EngineFailMode(config::FailMode mode) {
  switch (mode) {
    case config::FailMode::kClosed:
      return FailMode::kClosed;
    case config::FailMode::kLocal:
      return FailMode::kLocal;
    case config::FailMode::kOpen:
      break;
  }
  return FailMode::kOpen;
}

// The store scopes of one request's checks. Reused from request to request: assigning keeps
// the strings' capacity.
struct Scopes {
  std::string primary;  // the batch's: the plan's scope (key:, account:, ip:), or badkey:
  std::string key;      // key:<id>, account:<id>, ip:<address>: filled by Fill() when a check
  std::string account;  // counts in a scope other than the primary one
  std::string ip;
  void Fill(const policy::Key* key, std::string_view address);
  // Where a check of `scope` counts: "" when that is the primary scope (the batch's), else the
  // scope's string. REQUIRES: Fill() (unless every check counts in the primary scope).
  std::string_view For(config::LimitScope scope) const;
};

// Fills `out` with one check per limit of `plan` (a key's override replaces a plan limit until
// it expires), each of `cost`, enforced as the key is (Key::enforced: its mode, its plan's
// cohort or mode), or as the plan is for anonymous limits. Returns the count
// (at most out.size()). `key` may be null (anonymous limits). The checks point into `plan` and
// `key`, which must outlive them.
// `scopes`: filled (Scopes::Fill) when the plan has limits of other scopes (mixed_scopes).
size_t ChecksFor(const policy::Plan& plan, const policy::Key* key, int64_t cost, core::Instant now,
                 std::span<store::Check> out, const Scopes* scopes = nullptr);

// Appends the checks of `route`'s own limits for a caller of `plan` (`key` null: anonymous)
// after the `n` checks already in `out`; returns the new count. A limit of scope key or account
// is skipped for an anonymous caller, a limit `unlimited` for the plan, and a limit with
// `exempt_enforced_keys` for a key whose limits are enforced. Whether a check rejects follows
// the limit's `mode`: `caller_enforced` (the caller's mode), `global_enforced` or
// `caller_enforced` (limits that hold every caller), or never. REQUIRES: scopes filled.
size_t AppendRouteChecks(const policy::Route& route, const policy::Plan& plan,
                         const policy::Key* key, int64_t cost, bool caller_enforced,
                         bool global_enforced, const Scopes& scopes, std::span<store::Check> out,
                         size_t n);

// The store scope of a request's checks into `scope`, reusing its capacity (per request on the
// gateway's hot path): "key:<id>", "account:<id>" (plans counted per account) or "ip:<address>".
void AssignScope(std::string& scope, const policy::Plan& plan, const policy::Key* key,
                 std::string_view address);

// Who a request is and what it is checked against: the first half of every decision, the same
// for the gateway and libtollgate.
struct Admission {
  enum class Kind {
    kNone,         // no limits apply (a route of `identity: none`)
    kChecks,       // `n` checks of `plan` (with `key`'s overrides)
    kInvalidKey,   // a request that needs a key has none, or one tollgate does not know:
                   // one check, the per-address invalid-key limit (identity.invalid_key_limit)
    kInvalidCost,  // the route's cost cannot be read from the query: `error`
  };
  Kind kind = Kind::kNone;
  const policy::Plan* plan = nullptr;  // kChecks, kInvalidCost
  const policy::Key* key = nullptr;    // the same; null for per-address (anonymous) limits
  size_t n = 0;                        // checks written (kChecks, kInvalidKey)
  int64_t cost = 0;                    // kChecks
  bool enforced = true;                // kChecks: the key's (or, anonymous, the plan's) mode
  std::string error;                   // kInvalidCost
};

// Whether a request on `route` is limited by its key: always on `key` and `client_cert` routes,
// on `key_or_ip` routes when it presents one (else it is limited by its address), never
// otherwise.
inline bool LimitedByKey(const policy::Route& route, bool presented_a_key) {
  return route.identity == config::RouteIdentity::kKey ||
         route.identity == config::RouteIdentity::kClientCert ||
         (route.identity == config::RouteIdentity::kKeyOrIp && presented_a_key);
}

// `keyed`: the request needs a key (LimitedByKey, or the endpoint is about the caller's key);
// `key`: what the presented key names, null for none or an unknown one. Writes the checks into
// `checks` and their store scope into `scope` (reusing its capacity). The cost is `fixed_cost` when
// given, else the route's, read from `query`.
Admission Admit(const policy::Policy& pol, const policy::Route& route, bool keyed,
                const policy::Key* key, std::string_view client, std::string_view query,
                std::optional<int64_t> fixed_cost, core::Instant now,
                std::span<store::Check> checks, Scopes& scopes);

}  // namespace tollgate::engine
