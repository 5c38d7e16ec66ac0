// The client connections a listener may hold: all of them (server.max_connections,
// server.admin_max_connections) and those of one client address
// (server.max_connections_per_address), each place held by a ConnectionSlot while its
// connection lives.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>

#include <absl/container/flat_hash_map.h>

namespace tollgate::http {

class ConnectionBudget;

// A client connection's place in a budget: in its total and, unless the peer is a trusted proxy,
// among its address's connections. Given back when the slot is destroyed. Not thread-safe;
// moved from the accepting coroutine into the connection's. REQUIRES: its budget outlives it.
class ConnectionSlot {
 public:
  ConnectionSlot() = default;
  ConnectionSlot(const ConnectionSlot&) = delete;
  ConnectionSlot& operator=(const ConnectionSlot&) = delete;
  ConnectionSlot(ConnectionSlot&& o) noexcept;
  ConnectionSlot& operator=(ConnectionSlot&&) = delete;
  ~ConnectionSlot();

 private:
  friend class ConnectionBudget;
  ConnectionBudget* total_ = nullptr;       // holds a place in its total
  ConnectionBudget* by_address_ = nullptr;  // holds a place among address_'s connections
  std::string address_;
};

// Thread-safe: the listener's workers share it.
class ConnectionBudget {
 public:
  // `max_total`: the most connections at once. `max_per_address`: the most from one address
  // (see TakeAddress()); 0: no such limit.
  ConnectionBudget(size_t max_total, size_t max_per_address)
      : max_total_(max_total), max_per_address_(max_per_address) {}
  ConnectionBudget(const ConnectionBudget&) = delete;
  ConnectionBudget& operator=(const ConnectionBudget&) = delete;

  // Takes a place in the total for `slot` if fewer than max_total are taken.
  // REQUIRES: `slot` holds no place in a total yet.
  bool TakeTotal(ConnectionSlot& slot);
  // Whether connections are limited per address (max_per_address > 0).
  bool LimitsAddresses() const { return max_per_address_ > 0; }
  // Takes a place among `address`'s connections for `slot` if fewer than max_per_address are
  // taken. REQUIRES: LimitsAddresses(), and `slot` holds no place among an address's yet.
  bool TakeAddress(ConnectionSlot& slot, std::string address);

  // The connections holding a place now (tollgate_connections), and those of `address`.
  size_t OpenApprox() const { return total_.load(std::memory_order_relaxed); }
  size_t OpenFrom(std::string_view address) const;

 private:
  friend class ConnectionSlot;
  void ReleaseAddress(const std::string& address);

  const size_t max_total_;
  const size_t max_per_address_;
  std::atomic<size_t> total_{0};
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, size_t> by_address_;  // under mu_; no entry at 0
};

}  // namespace tollgate::http
