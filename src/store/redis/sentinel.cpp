#include "store/redis/sentinel.hpp"

#include <charconv>
#include <string>
#include <vector>

namespace tollgate::store::redis {
namespace {

const std::string* StringOf(const RedisValue& v) { return std::get_if<std::string>(&v.v); }
const std::vector<RedisValue>* ArrayOf(const RedisValue& v) {
  return std::get_if<std::vector<RedisValue>>(&v.v);
}

std::optional<int64_t> IntegerOf(std::string_view s) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<NodeAddress> MasterAddressOf(const RedisValue& reply) {
  const auto* a = ArrayOf(reply);
  if (!a || a->size() != 2) return std::nullopt;
  const std::string* host = StringOf((*a)[0]);
  const std::string* port = StringOf((*a)[1]);
  if (!host || !port || host->empty() || !IntegerOf(*port)) return std::nullopt;
  return NodeAddress{*host, *port};
}

std::optional<int64_t> ConfigEpochOf(const RedisValue& reply) {
  const auto* a = ArrayOf(reply);
  if (!a) return std::nullopt;
  for (size_t i = 0; i + 1 < a->size(); i += 2) {
    const std::string* field = StringOf((*a)[i]);
    const std::string* value = StringOf((*a)[i + 1]);
    if (field && value && *field == "config-epoch") return IntegerOf(*value);
  }
  return std::nullopt;
}

bool IsSwitchOf(const RedisValue& message, std::string_view master_name) {
  const auto* a = ArrayOf(message);
  if (!a || a->size() != 3) return false;
  const std::string* kind = StringOf((*a)[0]);
  const std::string* channel = StringOf((*a)[1]);
  const std::string* text = StringOf((*a)[2]);
  if (!kind || !channel || !text || *kind != "message" || *channel != "+switch-master")
    return false;
  const std::string_view fields(*text);
  return fields.substr(0, fields.find(' ')) == master_name;
}

std::string_view RoleOf(const RedisValue& reply) {
  const auto* a = ArrayOf(reply);
  if (!a || a->empty()) return {};
  const std::string* role = StringOf((*a)[0]);
  return role ? std::string_view(*role) : std::string_view();
}

bool IsReadOnly(std::string_view err) { return err.rfind("READONLY", 0) == 0; }

std::optional<SentinelAnswer> PickMaster(std::span<const std::optional<SentinelAnswer>> answers,
                                         const std::optional<SentinelAnswer>& current,
                                         size_t sentinels) {
  const SentinelAnswer* best = nullptr;
  size_t answered = 0;
  for (const auto& a : answers) {
    if (!a) continue;
    ++answered;
    const bool tie_to_current = best && a->epoch == best->epoch && current &&
                                a->master == current->master && best->master != current->master;
    if (!best || a->epoch > best->epoch || tie_to_current) best = &*a;
  }
  if (!best) return std::nullopt;
  if (current && best->epoch < current->epoch && 2 * answered <= sentinels) return std::nullopt;
  return *best;
}

}  // namespace tollgate::store::redis
