// What a store stack (the store and the layers in front of it: token leases, the deny cache, the
// local fallback) answers for besides decisions, and what the replicas sharing a store share
// through it (issue 32, part 3). The gateway speaks to these, never to a concrete store; the
// composition root (app/) builds the memory or the Redis implementation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <tollgate/core/time.hpp>
#include <tollgate/store/store.hpp>

namespace boost::asio {
class io_context;
}

namespace tollgate::store {

// The store's state for the admin UI.
struct StoreStatus {
  std::string_view type;  // "memory", "redis"
  bool breaker_open = false;
  uint64_t timeouts = 0;
  uint64_t errors = 0;
  std::string last_error;  // the last connection error, "" if none
};

// Thread-safe.
class Chores {
 public:
  virtual ~Chores() = default;

  // Whether the store answers now: `done(ready)` once, on any thread (memory: at once, true).
  virtual void CheckReady(std::function<void(bool ready)> done) = 0;
  // Forgets `batch`'s checks in every layer (POST /admin/reset): the next request of that
  // identity finds them fresh, on every replica. `batch` is read before Forget returns.
  // `done(error)` once, on any thread: "" when done.
  virtual void Forget(const Batch& batch, std::function<void(std::string error)> done) = 0;
  // Every 100 ms, on one thread: expired entries go; other replicas' resets are followed.
  virtual void Tick(core::Instant now) = 0;
  virtual StoreStatus Status() const = 0;

  // A store with connections of its own on each worker's loop (Redis): a lane per worker,
  // entered on that worker's thread, closed before the loops go. Others: nothing.
  virtual size_t AddLane(boost::asio::io_context& loop) {
    (void)loop;
    return 0;
  }
  virtual void EnterLane(size_t lane) { (void)lane; }
  virtual void CloseLanes() {}
};

// What the replicas sharing one store share through it: the admin API's deny entries and the
// replica count. A store no other replica shares (memory) has none. Thread-safe; callbacks run
// once, on any thread.
class Replicas {
 public:
  virtual ~Replicas() = default;

  // Adds or removes a deny entry ("key:ID", "account:A", "address:CIDR") for every replica.
  virtual void ChangeDenyEntry(bool add, std::string entry) = 0;
  // The entries every replica sees; nullopt when the store cannot be read (keep the last list).
  virtual void ReadDenyEntries(
      std::function<void(std::optional<std::vector<std::string>> entries)> done) = 0;
  // This replica's heartbeat (each second): the replicas seen move with it.
  virtual void Beat() = 0;
  // The replicas sharing the store, this one included (configured, or counted from the
  // heartbeats of the last 5 s): fail_mode: local divides each limit among them.
  virtual int Seen() const = 0;
};

}  // namespace tollgate::store
