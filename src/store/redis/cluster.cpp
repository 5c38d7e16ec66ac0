#include "store/redis/cluster.hpp"

#include <algorithm>
#include <string>

namespace tollgate::store::redis {
namespace {

// A byte at a time from a table.
constexpr std::array<uint16_t, 256> kCrc16Table = [] {
  std::array<uint16_t, 256> t{};
  for (int b = 0; b < 256; ++b) {
    uint16_t crc = static_cast<uint16_t>(b << 8);
    for (int i = 0; i < 8; ++i)
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
    t[static_cast<size_t>(b)] = crc;
  }
  return t;
}();

// hiredis's view of what is not the expected type: an empty string, a zero.
std::string_view TextOf(const RedisValue& v) {
  if (const auto* s = std::get_if<std::string>(&v.v)) return *s;
  if (const auto* e = std::get_if<RedisValue::Error>(&v.v)) return e->message;
  return {};
}
long long IntegerOf(const RedisValue& v) {
  const auto* i = std::get_if<long long>(&v.v);
  return i ? *i : 0;
}
const std::vector<RedisValue>* ArrayOf(const RedisValue& v, size_t min_size) {
  const auto* a = std::get_if<std::vector<RedisValue>>(&v.v);
  return a && a->size() >= min_size ? a : nullptr;
}

}  // namespace

uint16_t Crc16(std::string_view s) {
  uint16_t crc = 0;
  for (unsigned char c : s)
    crc = static_cast<uint16_t>((crc << 8) ^ kCrc16Table[((crc >> 8) ^ c) & 0xff]);
  return crc;
}

int HashSlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  return Crc16(key) % kSlots;
}

std::optional<Redirect> ParseRedirect(std::string_view err, const NodeAddress& from) {
  const bool moved = err.rfind("MOVED ", 0) == 0;
  if (!moved && err.rfind("ASK ", 0) != 0) return std::nullopt;
  auto node = ParseHostPort(err.substr(err.rfind(' ') + 1));
  if (!node) return std::nullopt;
  if (node->host.empty()) node->host = from.host;
  return Redirect{std::move(*node), moved};
}

bool IsTryAgain(std::string_view err) { return err.rfind("TRYAGAIN", 0) == 0; }

SlotMap::SlotMap() { slots_.fill(-1); }

std::optional<SlotMap> SlotMap::FromClusterSlots(const RedisValue& reply,
                                                 std::string_view asked_host) {
  const auto* ranges = ArrayOf(reply, 1);
  if (!ranges) return std::nullopt;
  SlotMap map;
  for (const RedisValue& entry : *ranges) {
    const auto* range = ArrayOf(entry, 3);
    if (!range) continue;
    const auto* master = ArrayOf((*range)[2], 2);
    if (!master) continue;
    NodeAddress a{std::string(TextOf((*master)[0])), std::to_string(IntegerOf((*master)[1]))};
    if (a.host.empty()) a.host = asked_host;  // "the node you asked"
    const int index = map.IndexOf(a);
    const long long last = IntegerOf((*range)[1]);
    // Clamped both ways: a malformed reply must not write outside the slot table.
    for (long long s = std::max(0LL, IntegerOf((*range)[0])); s <= last && s < kSlots; ++s) {
      map.slots_[static_cast<size_t>(s)] = index;
    }
  }
  return map;
}

const NodeAddress* SlotMap::Owner(int slot) const {
  const int index = slots_[static_cast<size_t>(slot)];
  return index >= 0 ? &masters_[static_cast<size_t>(index)] : nullptr;
}

void SlotMap::Assign(int slot, const NodeAddress& node) {
  slots_[static_cast<size_t>(slot)] = IndexOf(node);
}

int SlotMap::IndexOf(const NodeAddress& node) {
  const auto it = std::find(masters_.begin(), masters_.end(), node);
  if (it != masters_.end()) return static_cast<int>(it - masters_.begin());
  masters_.push_back(node);
  return static_cast<int>(masters_.size() - 1);
}

std::vector<NodeAddress> TopologyCandidates(const std::vector<NodeAddress>& seeds,
                                            const SlotMap& map) {
  std::vector<NodeAddress> candidates = seeds;
  for (const NodeAddress& a : map.masters()) {
    if (std::find(candidates.begin(), candidates.end(), a) == candidates.end())
      candidates.push_back(a);
  }
  return candidates;
}

}  // namespace tollgate::store::redis
