// Room for something a client holds for a while, in all and per identity (a key, an account or a
// client address): smoothing's held requests (server.max_held_requests, max_held_per_identity),
// reserved before a decision that may delay, so that the bounds are exact, and given back after
// the hold or at once when there is none; and upgraded connections (server.
// max_upgraded_connections, max_upgraded_per_identity), reserved before an upgrade's decision
// and given back when its tunnel closes.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include <absl/container/flat_hash_map.h>

namespace tollgate::http {

// Thread-safe: every worker reserves in it.
class IdentityBudget {
 public:
  IdentityBudget(size_t max_total, size_t max_per_identity)
      : max_total_(max_total), max_per_identity_(max_per_identity) {}
  IdentityBudget(const IdentityBudget&) = delete;
  IdentityBudget& operator=(const IdentityBudget&) = delete;

  enum class Refusal { kNone, kTotal, kIdentity };
  // Reserves room for one of `identity`; else which bound is reached (the total first).
  Refusal TryReserve(std::string_view identity);
  bool Reserve(std::string_view identity) { return TryReserve(identity) == Refusal::kNone; }
  // Gives back a reservation of `identity`; nothing when it holds none.
  void Release(std::string_view identity);

  // One reservation, given back when it ends (or by Release()). Movable.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(IdentityBudget& budget, std::string_view identity)
        : budget_(&budget), identity_(identity) {}
    Reservation(Reservation&& o) noexcept
        : budget_(std::exchange(o.budget_, nullptr)), identity_(std::move(o.identity_)) {}
    Reservation& operator=(Reservation&& o) noexcept {
      if (this != &o) {
        Release();
        budget_ = std::exchange(o.budget_, nullptr);
        identity_ = std::move(o.identity_);
      }
      return *this;
    }
    ~Reservation() { Release(); }
    bool held() const { return budget_ != nullptr; }
    void Release() {
      if (budget_) std::exchange(budget_, nullptr)->Release(identity_);
    }

   private:
    IdentityBudget* budget_ = nullptr;
    std::string identity_;
  };

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
