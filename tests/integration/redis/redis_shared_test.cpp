// store::RedisShared against a real redis-server: what replicas share through Redis (deny
// entries, the reset epoch, heartbeats), readiness and forgetting a batch, on the key layout of
// redis_keys.hpp (issue 32, part 3).
#include <tollgate/store/redis_shared.hpp>

#include <algorithm>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <tollgate/store/redis_keys.hpp>
#include <tollgate/store/redis_store.hpp>

#include "support/apply_sync.hpp"
#include "support/limits.hpp"
#include "support/redis_server.hpp"

namespace tollgate::store {
namespace {

std::unique_ptr<RedisStore> Make(const testing::RedisServer& s) {
  auto r = RedisStore::Create({.url = s.url(), .prefix = "sh", .timeout_ms = 500});
  EXPECT_TRUE(r.ok()) << r.error();
  return std::move(r).value();
}

// Waits for a callback's value (every call below answers within the store's timeout).
template <class T, class Call>
T Await(Call&& call) {
  std::promise<T> p;
  auto f = p.get_future();
  call([&p](T v) { p.set_value(std::move(v)); });
  EXPECT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  return f.get();
}

TEST(RedisShared, PingAnswersWhileTheServerRuns) {
  testing::RedisServer server;
  auto redis = Make(server);
  RedisShared shared(*redis, "sh");
  EXPECT_TRUE(Await<bool>([&](auto done) { shared.Ping(done); }));
  server.Stop();
  EXPECT_FALSE(Await<bool>([&](auto done) { shared.Ping(done); }));
}

TEST(RedisShared, DenyEntriesAreSharedUnderOneHash) {
  testing::RedisServer server;
  auto redis = Make(server);
  RedisShared a(*redis, "sh");
  using Entries = std::optional<std::vector<std::string>>;
  EXPECT_EQ(Await<Entries>([&](auto done) { a.ReadDenyEntries(done); }),
            std::vector<std::string>{});
  a.ChangeDenyEntry(true, "key:k1");
  a.ChangeDenyEntry(true, "address:198.51.100.0/24");
  a.ChangeDenyEntry(true, "key:k2");
  a.ChangeDenyEntry(false, "key:k1");
  // Another replica's client reads what this one wrote (commands of one lane keep their order).
  auto other = Make(server);
  RedisShared b(*other, "sh");
  Entries got = Await<Entries>([&](auto done) { a.ReadDenyEntries(done); });
  ASSERT_TRUE(got.has_value());
  std::sort(got->begin(), got->end());
  EXPECT_EQ(*got, (std::vector<std::string>{"address:198.51.100.0/24", "key:k2"}));
  EXPECT_EQ(Await<Entries>([&](auto done) { b.ReadDenyEntries(done); })->size(), 2u);
  EXPECT_EQ(server.Cli("HLEN " + redis_keys::Deny("sh")), "2");
  // Another prefix is another deployment.
  RedisShared c(*redis, "other");
  EXPECT_EQ(Await<Entries>([&](auto done) { c.ReadDenyEntries(done); })->size(), 0u);
  server.Stop();
  EXPECT_FALSE(Await<Entries>([&](auto done) { a.ReadDenyEntries(done); }).has_value());
}

TEST(RedisShared, ForgettingABatchDeletesItsKeysAndAdvancesTheEpoch) {
  testing::RedisServer server;
  auto redis = Make(server);
  RedisShared shared(*redis, "sh");
  using Epoch = std::optional<std::string>;
  EXPECT_EQ(Await<Epoch>([&](auto done) { shared.ReadResetEpoch(done); }), "0");
  const core::Limit burst = testing::Bucket(5, "0.001");
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  const Batch batch{.scope = "key:k1", .checks = checks};
  std::vector<core::Decision> d(1);
  ASSERT_EQ(testing::ApplySync(*redis, batch, d).error, StoreErrc::kOk);
  ASSERT_EQ(testing::ApplySync(*redis, batch, d).error, StoreErrc::kOk);
  EXPECT_EQ(d[0].remaining, 3);
  const std::string key = redis_keys::Limit("sh", "key:k1", "burst", "tb");
  EXPECT_EQ(server.Cli("EXISTS '" + key + "'"), "1");
  EXPECT_EQ(Await<std::string>([&](auto done) { shared.ForgetLimits(batch, done); }), "");
  EXPECT_EQ(server.Cli("EXISTS '" + key + "'"), "0");
  EXPECT_EQ(Await<Epoch>([&](auto done) { shared.ReadResetEpoch(done); }), "1");
  ASSERT_EQ(testing::ApplySync(*redis, batch, d).error, StoreErrc::kOk);
  EXPECT_EQ(d[0].remaining, 4);  // a fresh bucket
  server.Stop();
  EXPECT_NE(Await<std::string>([&](auto done) { shared.ForgetLimits(batch, done); }), "");
  EXPECT_FALSE(Await<Epoch>([&](auto done) { shared.ReadResetEpoch(done); }).has_value());
}

TEST(RedisShared, HeartbeatsCountTheReplicasOfTheLastFiveSeconds) {
  testing::RedisServer server;
  auto redis = Make(server);
  RedisShared shared(*redis, "sh");
  EXPECT_EQ(Await<int>([&](auto done) { shared.Beat("a", done); }), 1);
  EXPECT_EQ(Await<int>([&](auto done) { shared.Beat("b", done); }), 2);
  EXPECT_EQ(Await<int>([&](auto done) { shared.Beat("a", done); }), 2);  // one entry per id
  // A replica last seen more than 5 s ago (by Redis's clock) is not counted.
  const long long now_ms =
      std::stoll(server.Cli("EVAL \"local t = redis.call('TIME') return "
                            "t[1] * 1000\" 0"));
  server.Cli("ZADD " + redis_keys::Replicas("sh") + " " + std::to_string(now_ms - 6000) + " c");
  EXPECT_EQ(Await<int>([&](auto done) { shared.Beat("a", done); }), 2);
  EXPECT_EQ(server.Cli("ZSCORE " + redis_keys::Replicas("sh") + " c"), "");
}

}  // namespace
}  // namespace tollgate::store
