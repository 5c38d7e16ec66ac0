#include "connection_budget.hpp"

#include <utility>

namespace tollgate::http {

ConnectionSlot::ConnectionSlot(ConnectionSlot&& o) noexcept
    : total_(std::exchange(o.total_, nullptr)),
      by_address_(std::exchange(o.by_address_, nullptr)),
      address_(std::move(o.address_)) {}

ConnectionSlot::~ConnectionSlot() {
  if (total_) total_->total_.fetch_sub(1);
  if (by_address_) by_address_->ReleaseAddress(address_);
}

bool ConnectionBudget::TakeTotal(ConnectionSlot& slot) {
  // Taken, then given back when over: no lock, and never more than max_total_ for long.
  if (total_.fetch_add(1) >= max_total_) {
    total_.fetch_sub(1);
    return false;
  }
  slot.total_ = this;
  return true;
}

bool ConnectionBudget::TakeAddress(ConnectionSlot& slot, std::string address) {
  std::lock_guard lock(mu_);
  size_t& n = by_address_[address];
  if (n >= max_per_address_) {
    if (n == 0) by_address_.erase(address);
    return false;
  }
  ++n;
  slot.by_address_ = this;
  slot.address_ = std::move(address);
  return true;
}

size_t ConnectionBudget::OpenFrom(std::string_view address) const {
  std::lock_guard lock(mu_);
  // absl's string_view is not std's in Debian's build: keys are looked up as strings.
  auto it = by_address_.find(std::string(address));
  return it == by_address_.end() ? 0 : it->second;
}

void ConnectionBudget::ReleaseAddress(const std::string& address) {
  std::lock_guard lock(mu_);
  auto it = by_address_.find(address);
  if (--it->second == 0) by_address_.erase(it);
}

}  // namespace tollgate::http
