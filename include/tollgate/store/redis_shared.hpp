// The commands on a Redis store beside decisions (issue 32, part 3): readiness, forgetting a
// batch's state, and what the replicas sharing it share (the reset epoch, the admin API's deny
// entries, the heartbeats). Keys from redis_keys.hpp; scripts from src/store/*.lua.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <tollgate/store/store.hpp>

namespace tollgate::store {

class RedisStore;

// Thread-safe. Callbacks run once, on the store's thread. `redis` outlives it.
class RedisShared {
 public:
  RedisShared(RedisStore& redis, std::string prefix) : redis_(redis), prefix_(std::move(prefix)) {}

  // PING answered PONG.
  void Ping(std::function<void(bool pong)> done);
  // Deletes `batch`'s limit keys and advances the reset epoch; `done(error)`: "" when deleted.
  void ForgetLimits(const Batch& batch, std::function<void(std::string error)> done);
  // The reset epoch ("0" before the first reset); nullopt when Redis cannot be read.
  void ReadResetEpoch(std::function<void(std::optional<std::string> epoch)> done);
  // Adds or removes one deny entry ("kind:value").
  void ChangeDenyEntry(bool add, std::string entry);
  // Every deny entry; nullopt when Redis cannot be read.
  void ReadDenyEntries(std::function<void(std::optional<std::vector<std::string>>)> done);
  // `instance`'s heartbeat; `done(n)` with the replicas that beat in the last 5 s (not called
  // when Redis cannot be reached).
  void Beat(std::string instance, std::function<void(int replicas)> done);

 private:
  RedisStore& redis_;
  const std::string prefix_;
};

}  // namespace tollgate::store
