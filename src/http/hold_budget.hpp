// Smoothing's bounds (`on_limit: delay`): room for held requests, in all
// (server.max_held_requests) and per identity (server.max_held_per_identity), reserved before a
// decision that may delay, so that the bounds are exact, and given back after the hold or at
// once when there is none.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>

#include <absl/container/flat_hash_map.h>

namespace tollgate::http {

// Thread-safe: every worker reserves in it.
class HoldBudget {
 public:
  HoldBudget(size_t max_total, size_t max_per_identity)
      : max_total_(max_total), max_per_identity_(max_per_identity) {}
  HoldBudget(const HoldBudget&) = delete;
  HoldBudget& operator=(const HoldBudget&) = delete;

  // Reserves room for one held request of `identity`; false when either bound is reached.
  bool Reserve(std::string_view identity);
  // Gives back a reservation of `identity`; nothing when it holds none.
  void Release(std::string_view identity);

  // Reservations held now, in all and by `identity`.
  size_t Reserved() const;
  size_t ReservedBy(std::string_view identity) const;

 private:
  const size_t max_total_;
  const size_t max_per_identity_;
  mutable std::mutex mu_;
  size_t total_ = 0;                                      // under mu_
  absl::flat_hash_map<std::string, size_t> by_identity_;  // under mu_; no entry at 0
};

}  // namespace tollgate::http
