#include <tollgate/engine/checks.hpp>

namespace tollgate::engine {

void Scopes::Fill(const policy::Key* k, std::string_view address) {
  if (k) {
    key.assign("key:").append(k->id);
    account.assign("account:").append(k->account);
  } else {
    key.clear();
    account.clear();
  }
  ip.assign("ip:").append(address);
}

std::string_view Scopes::For(config::LimitScope scope) const {
  std::string_view s;
  switch (scope) {
    case config::LimitScope::kKey:
      s = key;
      break;
    case config::LimitScope::kAccount:
      s = account;
      break;
    case config::LimitScope::kIp:
      s = ip;
      break;
    case config::LimitScope::kGlobal:
      s = "global";
      break;
    case config::LimitScope::kDefault:
      break;
  }
  return s == primary ? std::string_view() : s;
}

size_t ChecksFor(const policy::Plan& plan, const policy::Key* key, int64_t cost, core::Instant now,
                 std::span<store::Check> out, const Scopes* scopes) {
  size_t n = 0;
  const bool enforced = key ? key->enforced : plan.enforced;
  for (size_t i = 0; i < plan.limits.size() && n < out.size(); ++i, ++n) {
    const policy::NamedLimit& l = plan.limits[i];
    out[n] = store::Check{l.check_name, key ? &key->LimitAt(i, now) : &l.limit, cost, enforced,
                          plan.mixed_scopes && scopes ? scopes->For(l.scope) : std::string_view()};
  }
  return n;
}

size_t AppendRouteChecks(const policy::Route& route, const policy::Plan& plan,
                         const policy::Key* key, int64_t cost, bool caller_enforced,
                         bool global_enforced, const Scopes& scopes, std::span<store::Check> out,
                         size_t n) {
  using Mode = config::RouteLimitConfig::Mode;
  for (const policy::RouteLimit& rl : route.limits) {
    if (n == out.size()) break;
    const std::optional<core::Limit>& limit = rl.per_plan[plan.index];
    if (!limit) continue;  // unlimited for this plan
    if (rl.exempt_enforced_keys && key && key->enforced) continue;
    // Issue 31: a shadow caller must not walk past (yet drain) a limit that protects everyone.
    // kEnforce: whoever calls, as soon as anything is enforced (the global mode, or this
    // caller's own limits in a rollout that enforces some plans first).
    const bool enforced = rl.mode == Mode::kCaller    ? caller_enforced
                          : rl.mode == Mode::kEnforce ? global_enforced || caller_enforced
                                                      : false;
    config::LimitScope scope = rl.scope;
    if (scope == config::LimitScope::kDefault) {
      scope = key ? config::LimitScope::kKey : config::LimitScope::kIp;
    }
    if (!key && (scope == config::LimitScope::kKey || scope == config::LimitScope::kAccount)) {
      continue;  // a key_or_ip route's per-key limit, for a caller without a key
    }
    out[n++] = store::Check{rl.check_name, &*limit, cost, enforced, scopes.For(scope)};
  }
  return n;
}

void AssignScope(std::string& scope, const policy::Plan& plan, const policy::Key* key,
                 std::string_view address) {
  if (!key) {
    scope.assign("ip:").append(address);
  } else if (plan.per_account) {
    scope.assign("account:").append(key->account);
  } else {
    scope.assign("key:").append(key->id);
  }
}

Admission Admit(const policy::Policy& pol, const policy::Route& route, bool keyed,
                const policy::Key* key, std::string_view client, std::string_view query,
                std::optional<int64_t> fixed_cost, core::Instant now,
                std::span<store::Check> checks, Scopes& scopes) {
  std::string& scope = scopes.primary;
  Admission a;
  if (keyed && !key) {
    a.kind = Admission::Kind::kInvalidKey;
    checks[0] = store::Check{"invalid_key", &pol.invalid_key_limit(), 1, true};
    a.n = 1;
    scope.assign("badkey:").append(client);
    return a;
  }
  if (keyed) {
    a.plan = key->plan;
    a.key = key;
  } else if (route.identity == config::RouteIdentity::kIp ||
             route.identity == config::RouteIdentity::kKeyOrIp) {
    a.plan = &pol.anonymous();
  } else {
    return a;
  }
  if (fixed_cost) {
    a.cost = *fixed_cost;
  } else {
    auto cost = pol.Cost(route, query);
    if (!cost) {
      a.kind = Admission::Kind::kInvalidCost;
      a.error = cost.error();
      return a;
    }
    a.cost = *cost;
  }
  a.kind = Admission::Kind::kChecks;
  a.enforced = a.key ? a.key->enforced : a.plan->enforced;
  AssignScope(scope, *a.plan, a.key, client);
  const bool other_scopes = a.plan->mixed_scopes || !route.limits.empty();
  if (other_scopes) scopes.Fill(a.key, client);
  a.n = ChecksFor(*a.plan, a.key, a.cost, now, checks, other_scopes ? &scopes : nullptr);
  if (!route.limits.empty()) {
    a.n = AppendRouteChecks(route, *a.plan, a.key, a.cost, a.enforced, pol.anonymous().enforced,
                            scopes, checks, a.n);
  }
  return a;
}

}  // namespace tollgate::engine
