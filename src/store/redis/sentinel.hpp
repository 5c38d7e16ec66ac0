// Redis Sentinel, the pure part: what the sentinels answer, which master to follow, and what a
// node says of its role.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <tollgate/store/redis_store.hpp>

#include "store/redis/url.hpp"

namespace tollgate::store::redis {

// One sentinel's answer: the master it names and the configuration epoch of that choice (each
// failover raises it; a sentinel that has not yet heard of the last failover names the old
// master with the older epoch).
struct SentinelAnswer {
  NodeAddress master;
  int64_t epoch = 0;
  bool operator==(const SentinelAnswer& o) const = default;
};

// The reply to SENTINEL GET-MASTER-ADDR-BY-NAME: [ip, port]. nullopt for nil (the sentinel
// monitors no master of that name), an error, or any other shape.
std::optional<NodeAddress> MasterAddressOf(const RedisValue& reply);

// The "config-epoch" field of the reply to SENTINEL MASTER (a flat array: field, value, ...);
// nullopt when absent or not a number.
std::optional<int64_t> ConfigEpochOf(const RedisValue& reply);

// Whether `message`, on a connection subscribed to +switch-master, announces a new master for
// `master_name`: ["message", "+switch-master", "<name> <old ip> <old port> <new ip> <new port>"].
bool IsSwitchOf(const RedisValue& message, std::string_view master_name);

// The role in the reply to ROLE ("master", "slave", "sentinel"); "" for anything else.
std::string_view RoleOf(const RedisValue& reply);

// "READONLY ...": the node is a replica (a master demoted since the connection was verified).
bool IsReadOnly(std::string_view err);

// Which master to follow, given each sentinel's answer (nullopt: it did not answer) and the one
// followed now: the answer with the highest epoch; on a tie, `current` if it is among them,
// else the first. An answer older than `current` is taken only when a majority of the
// `sentinels` configured gave answers (they all missed the last failover, or were reset);
// otherwise it is a sentinel lagging behind one that did not answer this time, and nullopt
// keeps `current`. nullopt too when nobody answered.
std::optional<SentinelAnswer> PickMaster(std::span<const std::optional<SentinelAnswer>> answers,
                                         const std::optional<SentinelAnswer>& current,
                                         size_t sentinels);

}  // namespace tollgate::store::redis
