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

std::string ScopeFor(const policy::Plan& plan, const policy::Key* key, std::string_view address) {
  if (!key) return "ip:" + std::string(address);
  return plan.per_account ? "account:" + key->account : "key:" + key->id;
}

}  // namespace tollgate::engine
