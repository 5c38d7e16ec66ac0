// RedisStore on Redis Sentinel (redis-sentinel://): the URL and the sentinels' replies, then a
// real master, replica and three sentinels started by the test, the master killed, brought
// back, and failed over by hand.
#include <tollgate/store/redis_store.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sentinel_deployment.hpp"
#include "store/redis/sentinel.hpp"
#include "store/redis/url.hpp"
#include "support/apply_sync.hpp"
#include "support/limits.hpp"
#include "support/redis_server.hpp"
#include "support/wait.hpp"

namespace tollgate::store {
namespace {

using core::Decision;
using core::Limit;
using redis::NodeAddress;
using redis::SentinelAnswer;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::ApplySync;
using testing::SentinelDeployment;
using testing::WaitUntil;

// ---------------------------------------------------------------------------------------------
// The URL and the replies (pure).

RedisValue Str(std::string s) { return {std::move(s)}; }
RedisValue Arr(std::vector<RedisValue> items) { return {std::move(items)}; }

TEST(SentinelUrl, NamesTheMasterTheSentinelsAndTheMastersCredentials) {
  auto url = redis::ParseUrl("redis-sentinel://alice:p@ss@mymaster@a:26379,b:26380/2");
  ASSERT_TRUE(url.ok()) << url.error();
  EXPECT_TRUE(url->sentinel);
  EXPECT_FALSE(url->cluster);
  EXPECT_FALSE(url->tls);
  EXPECT_EQ(url->master_name, "mymaster");
  EXPECT_EQ(url->nodes, (std::vector<NodeAddress>{{"a", "26379"}, {"b", "26380"}}));
  EXPECT_EQ(url->user, "alice");
  EXPECT_EQ(url->password, "p@ss");  // the name ends at the last '@', the credentials before it
  EXPECT_EQ(url->db, 2);
  auto bare = redis::ParseUrl("redis-sentinel://m@h:1");
  ASSERT_TRUE(bare.ok()) << bare.error();
  EXPECT_EQ(bare->master_name, "m");
  EXPECT_EQ(bare->password, "");
}

TEST(SentinelUrl, RefusesAMissingOrBadMasterName) {
  auto error = [](const char* u) {
    auto r = redis::ParseUrl(u);
    return r ? std::string() : r.error();
  };
  EXPECT_NE(error("redis-sentinel://h:1").find("got no master name"), std::string::npos);
  EXPECT_EQ(error("redis-sentinel://@h:1"), "store.url: empty master name");
  EXPECT_EQ(error("redis-sentinel://pw@@h:1"), "store.url: empty master name");
  EXPECT_EQ(error("redis-sentinel://my%20m\tx@h:1"), "store.url: bad master name 'my%20m\tx'");
  EXPECT_EQ(error("redis-sentinel://m@"), "store.url: no host");
  EXPECT_EQ(error("redis-sentinel://m@h"), "store.url: expected host:port, got 'h'");
  EXPECT_NE(error("rediss-sentinel://m@h:1").find("must start with"), std::string::npos);
  EXPECT_TRUE(RedisStore::Create({.url = "redis-sentinel://m@a:1,b:2,c:3"}).ok());
}

TEST(SentinelReplies, MasterAddressEpochSwitchAndRole) {
  EXPECT_EQ(redis::MasterAddressOf(Arr({Str("10.0.0.1"), Str("6380")})),
            (NodeAddress{"10.0.0.1", "6380"}));
  EXPECT_EQ(redis::MasterAddressOf(RedisValue{}), std::nullopt);  // nil: no such master
  EXPECT_EQ(redis::MasterAddressOf(Arr({Str("h"), Str("x")})), std::nullopt);
  EXPECT_EQ(redis::MasterAddressOf(RedisValue{RedisValue::Error{"ERR"}}), std::nullopt);
  EXPECT_EQ(redis::ConfigEpochOf(Arr({Str("name"), Str("m"), Str("config-epoch"), Str("7")})), 7);
  EXPECT_EQ(redis::ConfigEpochOf(Arr({Str("name"), Str("m")})), std::nullopt);
  const RedisValue sw =
      Arr({Str("message"), Str("+switch-master"), Str("m 127.0.0.1 1 127.0.0.1 2")});
  EXPECT_TRUE(redis::IsSwitchOf(sw, "m"));
  EXPECT_FALSE(redis::IsSwitchOf(sw, "m2"));
  EXPECT_FALSE(redis::IsSwitchOf(Arr({Str("subscribe"), Str("+switch-master"), {1LL}}), "m"));
  EXPECT_EQ(redis::RoleOf(Arr({Str("master"), {0LL}, Arr({})})), "master");
  EXPECT_EQ(redis::RoleOf(Arr({Str("slave"), Str("h"), {1LL}})), "slave");
  EXPECT_EQ(redis::RoleOf(RedisValue{RedisValue::Error{"ERR"}}), "");
  EXPECT_TRUE(redis::IsReadOnly("READONLY You can't write against a read only replica."));
  EXPECT_FALSE(redis::IsReadOnly("ERR READONLY"));
}

TEST(SentinelReplies, PickMasterFollowsTheNewestEpoch) {
  const SentinelAnswer old_master{{"h", "1"}, 3};
  const SentinelAnswer new_master{{"h", "2"}, 4};
  using Answers = std::vector<std::optional<SentinelAnswer>>;
  // The sentinel that led the failover knows first: its newer epoch wins over two that lag.
  EXPECT_EQ(redis::PickMaster(Answers{old_master, new_master, old_master}, old_master, 3),
            new_master);
  // Nobody answered: nothing to follow.
  EXPECT_EQ(redis::PickMaster(Answers{std::nullopt, std::nullopt}, old_master, 2), std::nullopt);
  // One lagging sentinel alone does not take us back; a majority does (they were reset).
  EXPECT_EQ(redis::PickMaster(Answers{old_master, std::nullopt, std::nullopt}, new_master, 3),
            std::nullopt);
  EXPECT_EQ(redis::PickMaster(Answers{old_master, old_master, std::nullopt}, new_master, 3),
            old_master);
  // A tie keeps the master followed now.
  const SentinelAnswer other{{"h", "9"}, 4};
  EXPECT_EQ(redis::PickMaster(Answers{other, new_master}, new_master, 2), new_master);
  EXPECT_EQ(redis::PickMaster(Answers{other, new_master}, std::nullopt, 2), other);
}

// ---------------------------------------------------------------------------------------------
// A real deployment.

// How many script calls (EVALSHA and EVAL, accepted, failed or rejected) `node` has received.
int64_t ScriptCalls(const testing::RedisServer& node) {
  const std::string info = node.Cli("INFO commandstats");
  int64_t total = 0;
  for (const char* cmd : {"cmdstat_evalsha:", "cmdstat_eval:"}) {
    const size_t at = info.find(cmd);
    if (at == std::string::npos) continue;
    const std::string line = info.substr(at, info.find('\n', at) - at);
    for (const std::string field : {":calls=", ",rejected_calls=", ",failed_calls="}) {
      const size_t f = line.find(field);
      if (f != std::string::npos) total += std::stoll(line.substr(f + field.size()));
    }
  }
  return total;
}

class SentinelTest : public ::testing::Test {
 protected:
  std::unique_ptr<RedisStore> MakeStore(const std::string& url) {
    auto r = RedisStore::Create({.url = url,
                                 .prefix = "s",
                                 .timeout_ms = 1000,  // a busy host starts slowly
                                 .connect_timeout_ms = 500,
                                 .breaker_failures = 5,
                                 .breaker_open_ms = 100});
    EXPECT_TRUE(r.ok()) << r.error();
    return r.ok() ? std::move(r).value() : nullptr;
  }
  ApplyResult Decide(RedisStore& store) {
    return ApplySync(store, Batch{.scope = "k", .checks = checks_}, d_);
  }
  // Decides until a decision succeeds (bounded); the failures on the way.
  int DecideUntilOk(RedisStore& store, seconds bound) {
    int failures = 0;
    const bool ok = WaitUntil(
        [&] {
          if (Decide(store).error == StoreErrc::kOk) return true;
          ++failures;
          return false;
        },
        bound, milliseconds(10));
    EXPECT_TRUE(ok) << "no decision succeeded within " << bound.count()
                    << " s; last error: " << store.LastError();
    return failures;
  }
  // The replica has every write the master acknowledged so far.
  void WaitReplicated() { EXPECT_EQ(deployment_.master().Cli("WAIT 1 2000"), "1"); }

  SentinelDeployment deployment_;
  const Limit burst_ = testing::Bucket(10, "0.001");  // nothing refills during a test
  const std::vector<Check> checks_ = {{"burst", &burst_, 1}};
  std::vector<Decision> d_ = std::vector<Decision>(1);
};

TEST_F(SentinelTest, DecidesOnTheMasterTheSentinelsName) {
  auto store = MakeStore(deployment_.Url());
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(DecideUntilOk(*store, seconds(5)), 0) << "the first decision waited for nothing";
  for (int i = 1; i < 12; ++i) {
    const ApplyResult r = Decide(*store);
    ASSERT_EQ(r.error, StoreErrc::kOk) << r.message;
    EXPECT_EQ(d_[0].allowed, i < 10) << i;
  }
  EXPECT_EQ(deployment_.master().Cli("EXISTS s:{k}:burst:tb"), "1");
  WaitReplicated();
  EXPECT_EQ(deployment_.replica().Cli("EXISTS s:{k}:burst:tb"), "1");
  EXPECT_EQ(ScriptCalls(deployment_.replica()), 0);
  EXPECT_EQ(store->stats().master_switches.load(), 0u);
}

// The master dies: the sentinels promote the replica, the store follows, and the budget goes
// on from where it was (the replica had every increment: WAIT).
TEST_F(SentinelTest, FollowsAFailoverAndTheBudgetCarriesOn) {
  auto store = MakeStore(deployment_.Url());
  ASSERT_NE(store, nullptr);
  DecideUntilOk(*store, seconds(5));
  for (int i = 1; i < 4; ++i) ASSERT_EQ(Decide(*store).error, StoreErrc::kOk);
  EXPECT_EQ(d_[0].remaining, 6);
  WaitReplicated();
  deployment_.master().Stop();  // SIGKILL
  const auto killed = std::chrono::steady_clock::now();
  const int failed = DecideUntilOk(*store, seconds(30));
  const auto took = std::chrono::steady_clock::now() - killed;
  EXPECT_GT(failed, 0);
  EXPECT_TRUE(d_[0].allowed);
  EXPECT_EQ(d_[0].remaining, 5);  // 4 taken before the kill, this one after
  EXPECT_EQ(store->stats().master_switches.load(), 1u);
  EXPECT_EQ(deployment_.replica().Cli("ROLE").substr(0, 6), "master");
  std::printf("[failover: decisions back %lld ms after the kill, %d failed meanwhile]\n",
              static_cast<long long>(std::chrono::duration_cast<milliseconds>(took).count()),
              failed);
}

// The old master comes back after the failover: empty, and a master until the sentinels turn it
// into a replica (some seconds). The store follows the sentinels, not whoever says "master".
TEST_F(SentinelTest, NeverWritesToTheOldMasterWhenItComesBack) {
  auto store = MakeStore(deployment_.Url());
  ASSERT_NE(store, nullptr);
  DecideUntilOk(*store, seconds(5));
  deployment_.master().Stop();
  DecideUntilOk(*store, seconds(30));
  deployment_.master().Start();  // the same port, empty, ROLE master
  const int64_t before = ScriptCalls(deployment_.master());
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(Decide(*store).error, StoreErrc::kOk) << store->LastError();
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(ScriptCalls(deployment_.master()), before);
  EXPECT_EQ(deployment_.master().Cli("EXISTS s:{k}:burst:tb"), "0");
  EXPECT_EQ(deployment_.replica().Cli("EXISTS s:{k}:burst:tb"), "1");
}

// SENTINEL FAILOVER with both nodes alive: the old master is demoted only seconds after the
// replica is promoted, and answers scripts meanwhile. The store follows the switch at once
// (+switch-master), so the old master gets no script from then on.
TEST_F(SentinelTest, AManualFailoverMovesDecisionsOffTheOldMaster) {
  auto store = MakeStore(deployment_.Url());
  ASSERT_NE(store, nullptr);
  DecideUntilOk(*store, seconds(5));
  ASSERT_EQ(deployment_.sentinel(0).Cli("SENTINEL FAILOVER mymaster"), "OK");
  ASSERT_TRUE(deployment_.WaitMasterIs(deployment_.replica().port(), seconds(20)));
  std::this_thread::sleep_for(milliseconds(300));  // the +switch-master reaches the store
  const int64_t old_calls = ScriptCalls(deployment_.master());
  const int64_t new_calls = ScriptCalls(deployment_.replica());
  for (int i = 0; i < 20; ++i) {
    const ApplyResult r = Decide(*store);
    EXPECT_EQ(r.error, StoreErrc::kOk) << r.message << " " << store->LastError();
  }
  EXPECT_EQ(ScriptCalls(deployment_.master()), old_calls);
  EXPECT_GE(ScriptCalls(deployment_.replica()), new_calls + 20);
  EXPECT_EQ(store->stats().master_switches.load(), 1u);
}

// A sentinel that names a replica as the master (here: told to monitor the replica under another
// name): ROLE answers "slave", the connection fails before any script leaves, decisions follow
// the fail mode, and the log says why.
TEST_F(SentinelTest, AReplicaNamedAsTheMasterNeverGetsAScript) {
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(deployment_.sentinel(i).Cli("SENTINEL MONITOR stale 127.0.0.1 " +
                                          std::to_string(deployment_.replica().port()) + " 2"),
              "OK");
  }
  std::string url = deployment_.Url();
  url.replace(url.find("mymaster"), 8, "stale");
  auto store = MakeStore(url);
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 10; ++i) {
    EXPECT_NE(Decide(*store).error, StoreErrc::kOk);
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(ScriptCalls(deployment_.replica()), 0);
  EXPECT_NE(store->LastError().find("not the master (ROLE: slave)"), std::string::npos)
      << store->LastError();
}

}  // namespace
}  // namespace tollgate::store
