#include <tollgate/engine/checks.hpp>

namespace tollgate::engine {

size_t ChecksFor(const policy::Plan& plan, const policy::Key* key, int64_t cost, core::Instant now,
                 std::span<store::Check> out) {
  size_t n = 0;
  for (size_t i = 0; i < plan.limits.size() && n < out.size(); ++i, ++n) {
    out[n] = store::Check{plan.limits[i].name, key ? &key->LimitAt(i, now) : &plan.limits[i].limit,
                          cost, key ? key->enforced : plan.enforced};
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

std::string ScopeFor(const policy::Plan& plan, const policy::Key* key, std::string_view address) {
  std::string scope;
  AssignScope(scope, plan, key, address);
  return scope;
}

Admission Admit(const policy::Policy& pol, const policy::Route& route, bool keyed,
                const policy::Key* key, std::string_view client, std::string_view query,
                std::optional<int64_t> fixed_cost, core::Instant now,
                std::span<store::Check> checks, std::string& scope) {
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
  a.n = ChecksFor(*a.plan, a.key, a.cost, now, checks);
  AssignScope(scope, *a.plan, a.key, client);
  return a;
}

}  // namespace tollgate::engine
