#include <tollgate/policy/policy_holder.hpp>

#include <utility>
#include <vector>

namespace tollgate::policy {

core::Result<bool> PolicyHolder::Install(config::Config config, const UnknownPlansFn& note) {
  std::lock_guard install(install_mu_);
  auto built = Policy::Build(std::move(config));
  if (!built) return core::Error{built.error()};
  {
    std::lock_guard lock(mu_);
    policy_ = *built;
  }
  generation_.fetch_add(1, std::memory_order_release);
  // Issue 31: keys of a plan that does not exist get the strictest plan: counted, and told when
  // their number changes (a key source reports every change: not a line each time).
  const std::vector<const config::KeyConfig*> keys = config::KeysOfUnknownPlans((*built)->config());
  if (unknown_plan_keys_.exchange(keys.size()) != keys.size() && !keys.empty() && note) {
    note(keys.size(), *keys[0]);
  }
  return true;
}

std::shared_ptr<const Policy> PolicyHolder::Current() const {
  std::lock_guard lock(mu_);
  return policy_;
}

}  // namespace tollgate::policy
