// Redis Cluster, the pure part: key slots, redirects, and the slot map from CLUSTER SLOTS.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <tollgate/store/redis_store.hpp>
#include <vector>

#include "store/redis/url.hpp"

namespace tollgate::store::redis {

inline constexpr int kSlots = 16384;

// CRC16-CCITT (XMODEM), as Redis Cluster computes slots.
uint16_t Crc16(std::string_view s);

// The cluster slot of a key: CRC16 of its hash tag (what is between the first '{' and the
// next '}', if not empty) when it has one, else of the whole key; 0 .. kSlots - 1.
int HashSlot(std::string_view key);

// A cluster redirect in an error reply: "MOVED <slot> <host>:<port>" (the slot moved: update the
// map) or "ASK <slot> <host>:<port>" (the slot is moving: send this command there, after ASKING).
struct Redirect {
  NodeAddress node;
  bool moved = false;
};
// The redirect in `err`, if it is one; `from`: the node that answered. nullopt for any other
// error, or a redirect whose address is not host:port.
std::optional<Redirect> ParseRedirect(std::string_view err, const NodeAddress& from);

// "TRYAGAIN ...": a slot in migration holds some of a command's keys but not all.
bool IsTryAgain(std::string_view err);

// Not thread-safe (a value type, 64 KiB). Which master serves each slot.
class SlotMap {
 public:
  SlotMap();  // every slot unknown

  // From a CLUSTER SLOTS reply: [[first, last, [host, port, ...], replicas...], ...]. Ranges
  // that are not so shaped are skipped; an empty host is `asked_host` (the node that answered).
  // nullopt when the reply is not a non-empty array (an error, or a node that knows no slots).
  static std::optional<SlotMap> FromClusterSlots(const RedisValue& reply,
                                                 std::string_view asked_host);

  // The master of `slot` (0 .. kSlots - 1), or nullptr when unknown.
  const NodeAddress* Owner(int slot) const;
  // After MOVED: `slot` is `node`'s now.
  void Assign(int slot, const NodeAddress& node);
  // Every master the map names, in the order first named.
  const std::vector<NodeAddress>& masters() const { return masters_; }

 private:
  int IndexOf(const NodeAddress& node);  // in masters_, where it is added if absent

  std::array<int, kSlots> slots_;  // index in masters_; -1: unknown
  std::vector<NodeAddress> masters_;
};

// Whom to ask for the slot map, in order: the seeds, then the masters of `map` that are not
// among them (after a failover the seeds may all be gone).
std::vector<NodeAddress> TopologyCandidates(const std::vector<NodeAddress>& seeds,
                                            const SlotMap& map);

}  // namespace tollgate::store::redis
