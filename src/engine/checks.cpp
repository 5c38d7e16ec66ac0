#include <tollgate/engine/checks.hpp>

namespace tollgate::engine {

size_t ChecksFor(const policy::Plan& plan, const policy::Key* key, int64_t cost, core::Instant now,
                 std::span<store::Check> out) {
  size_t n = 0;
  for (size_t i = 0; i < plan.limits.size() && n < out.size(); ++i, ++n) {
    out[n] = store::Check{plan.limits[i].name, key ? &key->LimitAt(i, now) : &plan.limits[i].limit,
                          cost, plan.enforced};
  }
  return n;
}

void AssignScope(std::string& scope, const policy::Plan& plan, const policy::Key* key, std::string_view address) {
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

}  // namespace tollgate::engine
