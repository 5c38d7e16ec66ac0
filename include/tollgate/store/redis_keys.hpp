// The Redis key layout, in one place (issue 32, part 3). Every key starts with the store's
// prefix (store.prefix). A limit's state and an account's usage carry a Cluster hash tag in
// braces, so that the keys of one identity live in one slot.
#pragma once

#include <string>
#include <string_view>

namespace tollgate::store::redis_keys {

// <prefix>:{<scope>}:<name>:<suffix>, the state of one limit of one scope ("key:ID",
// "ip:ADDR"); `suffix` names the algorithm (redis::AlgorithmSuffix: "tb", "log", "swc", "fw",
// "q"). Appended to anything with operator<< for string_view (the script protocol's buffer).
template <class Out>
void AppendLimit(Out& out, std::string_view prefix, std::string_view scope, std::string_view name,
                 std::string_view suffix) {
  out << prefix << ":{" << scope << "}:" << name << ":" << suffix;
}
inline size_t LimitSize(std::string_view prefix, std::string_view scope, std::string_view name,
                        std::string_view suffix) {
  return prefix.size() + 2 + scope.size() + 2 + name.size() + 1 + suffix.size();
}
inline std::string Limit(std::string_view prefix, std::string_view scope, std::string_view name,
                         std::string_view suffix) {
  std::string out;
  out.reserve(LimitSize(prefix, scope, name, suffix));
  out.append(prefix).append(":{").append(scope).append("}:").append(name).append(":").append(
      suffix);
  return out;
}

// The admin API's deny entries: a hash of "kind:value" fields.
inline std::string Deny(std::string_view prefix) { return std::string(prefix) + ":deny"; }
// Counts resets (POST /admin/reset): a replica that sees it move clears its caches.
inline std::string ResetEpoch(std::string_view prefix) {
  return std::string(prefix) + ":reset-epoch";
}
// The replicas' heartbeats: a sorted set of instance ids by their last beat.
inline std::string Replicas(std::string_view prefix) { return std::string(prefix) + ":replicas"; }
// One account's usage of one period ("2026-11-29", "2026-11"): a hash of counters.
inline std::string Usage(std::string_view prefix, std::string_view account,
                         std::string_view period) {
  return std::string(prefix) + ":{usage:" + std::string(account) + "}:" + std::string(period);
}
// The accounts with usage in one period: a set.
inline std::string UsageIndex(std::string_view prefix, std::string_view period) {
  return std::string(prefix) + ":usage:" + std::string(period);
}

}  // namespace tollgate::store::redis_keys
