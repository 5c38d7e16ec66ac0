#include "identity_budget.hpp"

namespace tollgate::http {

// absl's string_view is not std's in Debian's build: keys are looked up as strings.

IdentityBudget::Refusal IdentityBudget::TryReserve(std::string_view identity) {
  std::lock_guard lock(mu_);
  if (total_ >= max_total_) return Refusal::kTotal;
  const std::string key(identity);
  size_t& mine = by_identity_[key];
  if (mine >= max_per_identity_) {
    if (mine == 0) by_identity_.erase(key);
    return Refusal::kIdentity;
  }
  ++mine;
  ++total_;
  return Refusal::kNone;
}

void IdentityBudget::Release(std::string_view identity) {
  std::lock_guard lock(mu_);
  auto it = by_identity_.find(std::string(identity));
  if (it == by_identity_.end()) return;
  --total_;
  if (--it->second == 0) by_identity_.erase(it);
}

size_t IdentityBudget::Reserved() const {
  std::lock_guard lock(mu_);
  return total_;
}

size_t IdentityBudget::ReservedBy(std::string_view identity) const {
  std::lock_guard lock(mu_);
  auto it = by_identity_.find(std::string(identity));
  return it == by_identity_.end() ? 0 : it->second;
}

}  // namespace tollgate::http
