#include <tollgate/store/redis_shared.hpp>

#include <tollgate/store/redis_keys.hpp>
#include <tollgate/store/redis_store.hpp>

#include "store/redis/lane.hpp"

namespace tollgate::store {

void RedisShared::Ping(std::function<void(bool)> done) {
  redis_.Command({"PING"}, 0, [done = std::move(done)](core::Result<RedisValue> r) {
    const auto* s = r ? std::get_if<std::string>(&r->v) : nullptr;
    done(s && *s == "PONG");
  });
}

void RedisShared::ForgetLimits(const Batch& batch, std::function<void(std::string)> done) {
  // The other replicas' caches forget everything within a second (they follow the epoch).
  redis_.Command({"INCR", redis_keys::ResetEpoch(prefix_)}, 1, [](auto) {});
  std::vector<std::string> command = RedisStore::KeysOf(prefix_, batch);
  if (command.empty()) return done("");
  command.insert(command.begin(), "DEL");
  redis_.Command(std::move(command), 1, [done = std::move(done)](core::Result<RedisValue> r) {
    if (!r) return done(r.error());
    if (std::holds_alternative<RedisValue::Error>(r->v)) return done("Redis refused the reset");
    done("");
  });
}

void RedisShared::ReadResetEpoch(std::function<void(std::optional<std::string>)> done) {
  redis_.Command({"GET", redis_keys::ResetEpoch(prefix_)}, 1,
                 [done = std::move(done)](core::Result<RedisValue> r) {
                   if (!r) return done(std::nullopt);  // Redis unreachable
                   const auto* value = std::get_if<std::string>(&r->v);
                   done(value ? *value : "0");  // nil: no reset yet
                 });
}

void RedisShared::ChangeDenyEntry(bool add, std::string entry) {
  std::vector<std::string> command{add ? "HSET" : "HDEL", redis_keys::Deny(prefix_),
                                   std::move(entry)};
  if (add) command.push_back("1");
  redis_.Command(std::move(command), 1, [](auto) {});
}

void RedisShared::ReadDenyEntries(
    std::function<void(std::optional<std::vector<std::string>>)> done) {
  redis_.Command({"HGETALL", redis_keys::Deny(prefix_)}, 1,
                 [done = std::move(done)](core::Result<RedisValue> r) {
                   const auto* items = r ? std::get_if<std::vector<RedisValue>>(&r->v) : nullptr;
                   if (!items) return done(std::nullopt);
                   std::vector<std::string> entries;
                   for (size_t i = 0; i + 1 < items->size(); i += 2) {
                     if (const auto* field = std::get_if<std::string>(&(*items)[i].v)) {
                       entries.push_back(*field);
                     }
                   }
                   done(std::move(entries));
                 });
}

void RedisShared::Beat(std::string instance, std::function<void(int)> done) {
  redis_.Command({"EVAL", std::string(internal::kHeartbeatScript), "1",
                  redis_keys::Replicas(prefix_), std::move(instance)},
                 3, [done = std::move(done)](core::Result<RedisValue> r) {
                   const auto* n = r ? std::get_if<long long>(&r->v) : nullptr;
                   if (n && *n > 0) done(static_cast<int>(*n));
                 });
}

}  // namespace tollgate::store
