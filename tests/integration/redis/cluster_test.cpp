// RedisStore against a real 3-master Redis Cluster started by the test.
#include <tollgate/store/redis_store.hpp>

#include <future>
#include <memory>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>

#include "support/apply_sync.hpp"
#include "support/redis_server.hpp"
#include "support/tls_certs.hpp"
#include "support/wait.hpp"

namespace tollgate::store {
namespace {

using core::Decision;
using core::Limit;

using testing::ApplySync;
using testing::WaitUntil;

// A token bucket of `capacity` that refills slowly (one token in 1,000 s): within a test, only
// the tokens taken count.
Limit Bucket(int64_t capacity) {
  return Limit::Create({.algorithm = core::Algorithm::kTokenBucket,
                        .capacity = capacity,
                        .refill = core::Rate::Parse("0.001", 1).value()})
      .value();
}

// Waits (bounded) until every node reports the cluster ready.
bool WaitClusterReady(const std::vector<std::unique_ptr<testing::RedisServer>>& nodes) {
  return WaitUntil(
      [&] {
        for (auto& n : nodes) {
          if (n->Cli("CLUSTER INFO").find("cluster_state:ok") == std::string::npos) return false;
        }
        return true;
      },
      std::chrono::seconds(10), std::chrono::milliseconds(50));
}

// How many TRYAGAIN errors `node` has answered (INFO errorstats), scripts' included.
int64_t TryAgainAnswers(const testing::RedisServer& node) {
  const std::string info = node.Cli("INFO errorstats");
  const std::string field = "errorstat_TRYAGAIN:count=";
  const size_t at = info.find(field);
  return at == std::string::npos ? 0 : std::stoll(info.substr(at + field.size()));
}

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (int i = 0; i < 3; ++i) {
      nodes_.push_back(std::make_unique<testing::RedisServer>(
          std::vector<std::string>{"--cluster-enabled", "yes", "--cluster-config-file",
                                   "nodes.conf", "--cluster-node-timeout", "2000"}));
    }
    std::string create = "--cluster create";
    for (auto& n : nodes_) create += " 127.0.0.1:" + std::to_string(n->port());
    nodes_[0]->Cli(create + " --cluster-replicas 0 --cluster-yes");
    if (!WaitClusterReady(nodes_)) FAIL() << "cluster did not become ready";
  }
  static void TearDownTestSuite() { nodes_.clear(); }

  static std::string Url() {
    return "redis-cluster://127.0.0.1:" + std::to_string(nodes_[0]->port());
  }
  // A store on the cluster, its keys under `prefix`.
  static std::unique_ptr<RedisStore> MakeStore(const std::string& prefix, int timeout_ms = 2000) {
    auto r = RedisStore::Create({.url = Url(), .prefix = prefix, .timeout_ms = timeout_ms});
    EXPECT_TRUE(r.ok()) << r.error();
    return r.ok() ? std::move(r).value() : nullptr;
  }
  // The node that serves `slot` now, per CLUSTER NODES on node 0.
  static testing::RedisServer* Owner(int slot) {
    for (auto& n : nodes_) {
      if (n->Cli("CLUSTER COUNTKEYSINSLOT " + std::to_string(slot)).find("MOVED") ==
              std::string::npos &&
          n->Cli("-c CLUSTER KEYSLOT x") != "") {
        const std::string myid = n->Cli("CLUSTER MYID");
        std::stringstream nodes(n->Cli("CLUSTER NODES"));
        std::string line;
        while (std::getline(nodes, line)) {
          if (line.rfind(myid, 0) != 0) continue;
          std::stringstream fields(line);
          std::string f;
          for (int i = 0; i < 8 && fields >> f;) ++i;
          while (fields >> f) {
            const size_t dash = f.find('-');
            const int lo = std::stoi(f.substr(0, dash));
            const int hi = dash == std::string::npos ? lo : std::stoi(f.substr(dash + 1));
            if (slot >= lo && slot <= hi) return n.get();
          }
        }
      }
    }
    return nullptr;
  }

  // Starts moving the slot of `key` (quoted for redis-cli) to another node, with the key (unless
  // `move_key` is false): IMPORTING / MIGRATING, then MIGRATE. Until FinishMigration the old
  // owner answers ASK for keys it no longer holds.
  struct Migration {
    testing::RedisServer* from = nullptr;
    testing::RedisServer* to = nullptr;
    std::string slot;
    std::string to_id;
    void MoveKey(const std::string& key) const {
      from->Cli("MIGRATE 127.0.0.1 " + std::to_string(to->port()) + " " + key + " 0 5000");
    }
  };
  static Migration StartMigration(const std::string& key, bool move_key = true) {
    const int slot = std::stoi(nodes_[0]->Cli("CLUSTER KEYSLOT " + key));
    testing::RedisServer* from = Owner(slot);
    EXPECT_NE(from, nullptr);
    if (!from) return {};
    Migration m{from, nodes_[0].get() == from ? nodes_[1].get() : nodes_[0].get(),
                std::to_string(slot), ""};
    m.to_id = m.to->Cli("CLUSTER MYID");
    m.to->Cli("CLUSTER SETSLOT " + m.slot + " IMPORTING " + from->Cli("CLUSTER MYID"));
    from->Cli("CLUSTER SETSLOT " + m.slot + " MIGRATING " + m.to_id);
    if (move_key) m.MoveKey(key);
    return m;
  }
  // The slot is the new node's, everywhere: the old owner answers MOVED.
  static void FinishMigration(const Migration& m) {
    for (auto& n : nodes_) n->Cli("CLUSTER SETSLOT " + m.slot + " NODE " + m.to_id);
  }

  static std::vector<std::unique_ptr<testing::RedisServer>> nodes_;
};
std::vector<std::unique_ptr<testing::RedisServer>> ClusterTest::nodes_;

TEST_F(ClusterTest, LimitsHoldAcrossSlotsAndEveryCheckOfAKeyShareOneSlot) {
  auto owned = MakeStore("c");
  ASSERT_NE(owned, nullptr);
  auto& store = *owned;
  const Limit burst = Bucket(5);
  const Limit daily = Limit::Create({.algorithm = core::Algorithm::kQuota, .ceiling = 100}).value();
  const std::vector<Check> checks = {{"burst", &burst, 1}, {"daily", &daily, 1}};
  std::vector<Decision> d(2);
  // Many identities: their slots spread over all three masters.
  for (int k = 0; k < 30; ++k) {
    const std::string scope = "key:" + std::to_string(k);
    int accepted = 0;
    for (int i = 0; i < 8; ++i) {
      const ApplyResult res = ApplySync(store, Batch{.scope = scope, .checks = checks}, d);
      ASSERT_EQ(res.error, StoreErrc::kOk) << res.message;
      accepted += res.committed;
    }
    EXPECT_EQ(accepted, 5) << scope;
  }
  // Both keys of one identity live on one node (a cross-slot script would have failed above).
  const std::string slot_a = nodes_[0]->Cli("CLUSTER KEYSLOT 'c:{key:7}:burst:tb'");
  const std::string slot_b = nodes_[0]->Cli("CLUSTER KEYSLOT 'c:{key:7}:daily:q'");
  EXPECT_EQ(slot_a, slot_b);
}

TEST_F(ClusterTest, ReshardingMovedIsFollowed) {
  auto owned = MakeStore("m");
  ASSERT_NE(owned, nullptr);
  auto& store = *owned;
  const Limit burst = Bucket(50);
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  std::vector<Decision> d(1);
  const std::string scope = "key:moving";
  ASSERT_EQ(ApplySync(store, Batch{.scope = scope, .checks = checks}, d).error, StoreErrc::kOk);
  // Move the slot with its key: IMPORTING / MIGRATING, MIGRATE, then NODE everywhere.
  const Migration m = StartMigration("'m:{key:moving}:burst:tb'");
  ASSERT_NE(m.to, nullptr);
  FinishMigration(m);
  // The store still maps the slot to the old node: it must follow MOVED and keep the budget.
  for (int i = 0; i < 3; ++i) {
    const ApplyResult res = ApplySync(store, Batch{.scope = scope, .checks = checks}, d);
    ASSERT_EQ(res.error, StoreErrc::kOk) << res.message;
    EXPECT_EQ(d[0].remaining, 48 - i);
  }
  EXPECT_GE(store.stats().redirects.load(), 1u);
}

// Decisions sent at once for one key (so they leave in groups) while its slot moves: a group
// answered ASK (slot migrating, key already on the importing node) or MOVED (slot moved) sends
// each of its decisions on, and the budget stays exact across both nodes.
TEST_F(ClusterTest, GroupedDecisionsFollowAskThenMoved) {
  auto owned = MakeStore("g");
  ASSERT_NE(owned, nullptr);
  auto& store = *owned;
  const Limit burst = Bucket(100);
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  const std::string scope = "key:grouped";
  const std::string key = "'g:{key:grouped}:burst:tb'";
  // Sends n decisions at once; returns how many committed, after every reply is in.
  auto burst_of = [&](int n) {
    std::vector<Decision> d(static_cast<size_t>(n));
    std::vector<std::promise<ApplyResult>> replies(static_cast<size_t>(n));
    for (size_t i = 0; i < replies.size(); ++i) {
      store.Apply(Batch{.scope = scope, .checks = checks}, {&d[i], 1},
                  [&replies, i](ApplyResult&& res) { replies[i].set_value(std::move(res)); });
    }
    int committed = 0;
    for (auto& reply : replies) {
      const ApplyResult res = reply.get_future().get();
      EXPECT_EQ(res.error, StoreErrc::kOk) << res.message;
      committed += res.committed;
    }
    return committed;
  };
  // Grouped: fewer script calls than decisions.
  const uint64_t calls_before = store.stats().calls.load(),
                 scripts_before = store.stats().scripts.load();
  EXPECT_EQ(burst_of(30), 30);
  const Migration m = StartMigration(key);
  ASSERT_NE(m.to, nullptr);
  // Mid-migration: the old owner answers ASK; the decisions go to the new one with ASKING.
  const uint64_t redirects_before = store.stats().redirects.load();
  EXPECT_EQ(burst_of(30), 30);
  EXPECT_GT(store.stats().redirects.load(), redirects_before);
  // Migration done: the old owner answers MOVED, and the store learns the new owner.
  FinishMigration(m);
  EXPECT_EQ(burst_of(60), 40);  // the rest of the 100, exactly
  EXPECT_LT(store.stats().scripts.load() - scripts_before,
            store.stats().calls.load() - calls_before);
  EXPECT_EQ(m.to->Cli("EXISTS " + key), "1");
}

// A script naming several keys of a migrating slot, some of them moved already and some not
// (absent keys are full buckets here), gets TRYAGAIN: the store tries again until the slot has
// moved, and the budget stays exact.
TEST_F(ClusterTest, TryAgainDuringMigrationIsRetried) {
  auto owned = MakeStore("t", 3000);
  ASSERT_NE(owned, nullptr);
  auto& store = *owned;
  const Limit burst = Bucket(10);
  const Limit daily = Limit::Create({.algorithm = core::Algorithm::kQuota, .ceiling = 100}).value();
  const std::string scope = "key:tryagain";
  std::vector<Decision> d(2);
  const std::vector<Check> first = {{"burst", &burst, 1}};
  ASSERT_EQ(ApplySync(store, Batch{.scope = scope, .checks = first}, {d.data(), 1}).error,
            StoreErrc::kOk);
  // The slot migrates; its burst key is still on the old owner, its daily key exists nowhere.
  const std::string burst_key = "'t:{key:tryagain}:burst:tb'";
  const Migration m = StartMigration(burst_key, /*move_key=*/false);
  ASSERT_NE(m.to, nullptr);
  ASSERT_NE(m.from
                ->Cli("EVAL \"return redis.call('GET', KEYS[1])\" 2 " + burst_key +
                      " 't:{key:tryagain}:daily:q'")
                .find("TRYAGAIN"),
            std::string::npos);
  std::promise<ApplyResult> reply;
  const std::vector<Check> both = {{"burst", &burst, 1}, {"daily", &daily, 1}};
  const int64_t tryagain_before = TryAgainAnswers(*m.from);
  store.Apply(Batch{.scope = scope, .checks = both}, d,
              [&reply](ApplyResult&& res) { reply.set_value(std::move(res)); });
  // The store's call was answered TRYAGAIN and sent again at least once before the slot moves.
  ASSERT_TRUE(WaitUntil([&] { return TryAgainAnswers(*m.from) >= tryagain_before + 2; }))
      << TryAgainAnswers(*m.from) - tryagain_before;
  m.MoveKey(burst_key);
  FinishMigration(m);
  const ApplyResult res = reply.get_future().get();
  ASSERT_EQ(res.error, StoreErrc::kOk) << res.message;
  EXPECT_TRUE(res.committed);
  EXPECT_EQ(d[0].remaining, 8);  // the first decision's debit came along with the key
  EXPECT_EQ(d[1].used, 1);
  EXPECT_EQ(store.stats().breaker_open.load(), 0);
}

// Usage counts and reads are plain commands: after a slot moved, a count answered MOVED is
// reported as not run (so the usage meter sends it again) and the store learns the new owner;
// a read follows the redirect.
TEST_F(ClusterTest, PlainCommandsFollowMovedSlots) {
  auto owned = MakeStore("p");
  ASSERT_NE(owned, nullptr);
  auto& store = *owned;
  const std::string key = "p:{usage:acct}:day";
  auto fire = [&] {
    std::promise<RedisStore::FireResult> result;
    RedisStore::Fire f{{}, RedisStore::KeySlot(key), [&result](RedisStore::FireResult res) {
                         result.set_value(res);
                       }};
    RedisStore::EncodeCommand(f.command, {"HINCRBY", key, "requests", "1"});
    std::vector<RedisStore::Fire> commands;
    commands.push_back(std::move(f));
    store.FireAndForget(std::move(commands));
    return result.get_future().get();
  };
  auto read = [&] {
    std::promise<core::Result<RedisValue>> result;
    store.Command({"HGET", key, "requests"}, 1,
                  [&result](core::Result<RedisValue> v) { result.set_value(std::move(v)); });
    return result.get_future().get();
  };
  int counted = 0;
  for (int i = 0; i < 10 && counted == 0; ++i) {  // kNotRun until the store has the slot map
    counted += fire() == RedisStore::FireResult::kOk;
  }
  ASSERT_EQ(counted, 1);
  FinishMigration(StartMigration("'" + key + "'"));
  EXPECT_EQ(fire(), RedisStore::FireResult::kNotRun);  // answered MOVED: Redis did not count it
  EXPECT_EQ(fire(), RedisStore::FireResult::kOk);      // sent to the new owner
  // Moved once more: the read follows MOVED to the owner and sees both counts.
  FinishMigration(StartMigration("'" + key + "'"));
  const auto value = read();
  ASSERT_TRUE(value.ok()) << value.error();
  ASSERT_TRUE(std::holds_alternative<std::string>(value->v));
  EXPECT_EQ(std::get<std::string>(value->v), "2");
}

// A node importing a slot may lack the script (flushed, or a restarted node): the EVAL that
// answers NOSCRIPT after ASK goes there with ASKING too, or the node would send it back.
TEST_F(ClusterTest, NoScriptAfterAskIsResentWithAsking) {
  auto owned = MakeStore("n");
  ASSERT_NE(owned, nullptr);
  auto& store = *owned;
  const Limit burst = Bucket(10);
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  std::vector<Decision> d(1);
  for (int k = 0; k < 30; ++k) {  // a connection to every node, each with the script loaded
    ASSERT_EQ(ApplySync(store, Batch{.scope = "n:" + std::to_string(k), .checks = checks}, d).error,
              StoreErrc::kOk);
  }
  const std::string key = "'n:{key:asked}:burst:tb'";
  ASSERT_EQ(ApplySync(store, Batch{.scope = "key:asked", .checks = checks}, d).error,
            StoreErrc::kOk);
  const Migration m = StartMigration(key);  // the key moved: the old owner answers ASK
  ASSERT_NE(m.to, nullptr);
  m.to->Cli("SCRIPT FLUSH");
  const ApplyResult res = ApplySync(store, Batch{.scope = "key:asked", .checks = checks}, d);
  ASSERT_EQ(res.error, StoreErrc::kOk) << res.message;
  EXPECT_EQ(d[0].remaining, 8);
  FinishMigration(m);
}

// A seed that does not answer: the slot map comes from the next one.
TEST_F(ClusterTest, SlotMapComesFromTheFirstSeedThatAnswers) {
  const std::string url = "redis-cluster://127.0.0.1:" + std::to_string(testing::FreePort()) +
                          ",127.0.0.1:" + std::to_string(nodes_[1]->port());
  auto r = RedisStore::Create({.url = url, .prefix = "s", .timeout_ms = 2000});
  ASSERT_TRUE(r.ok()) << r.error();
  auto& store = **r;
  const Limit burst = Bucket(1);
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  std::vector<Decision> d(1);
  // Identities on every node: each decision goes to its slot's owner, none to the dead seed.
  for (int k = 0; k < 30; ++k) {
    ApplyResult res;
    WaitUntil(  // until the map is in
        [&] {
          res = ApplySync(store, Batch{.scope = "key:" + std::to_string(k), .checks = checks}, d);
          return res.error == StoreErrc::kOk;
        },
        std::chrono::seconds(5), std::chrono::milliseconds(20));
    ASSERT_EQ(res.error, StoreErrc::kOk) << res.message << " " << store.LastError();
    EXPECT_TRUE(res.committed);
  }
}

// Whether `node` knows the slots of the node `id`: its line of CLUSTER NODES has fields after
// the link state (id, address, flags, master, ping, pong, epoch, link, then slot ranges).
bool KnowsSlotsOf(const testing::RedisServer& node, const std::string& id) {
  std::stringstream nodes(node.Cli("CLUSTER NODES"));
  std::string line;
  while (std::getline(nodes, line)) {
    if (line.rfind(id, 0) != 0) continue;
    std::stringstream fields(line);
    int count = 0;
    for (std::string f; fields >> f;) ++count;
    return count > 8;
  }
  return false;
}

// A master dies and its replica takes over: the store learns the new map from the other nodes
// (the dead one answers nothing, so no MOVED would tell it) and the budget goes on from the
// replica's copy.
TEST(ClusterFailover, SlotsOfADeadMasterFollowItsReplica) {
  // Three masters and a replica, on ports whose cluster bus ports (+10000) are free.
  std::vector<std::unique_ptr<testing::RedisServer>> nodes;
  for (int i = 0; i < 4; ++i) {
    nodes.push_back(std::make_unique<testing::RedisServer>(std::vector<std::string>{
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout",
        "1000", "--repl-diskless-sync-delay", "0"}));
  }
  ASSERT_EQ(nodes.size(), 4u);
  auto replica = std::move(nodes.back());
  nodes.pop_back();
  std::string create = "--cluster create";
  for (auto& n : nodes) create += " 127.0.0.1:" + std::to_string(n->port());
  nodes[0]->Cli(create + " --cluster-replicas 0 --cluster-yes");
  ASSERT_TRUE(WaitClusterReady(nodes)) << "cluster did not become ready";
  // The replica follows the master of the test's key (the node that answers it, not MOVED).
  const std::string key = "'f:{key:failover}:burst:tb'";
  testing::RedisServer* master = nullptr;
  for (auto& n : nodes) {
    if (n->Cli("GET " + key).find("MOVED") == std::string::npos) master = n.get();
  }
  ASSERT_NE(master, nullptr);
  replica->Cli("CLUSTER MEET 127.0.0.1 " + std::to_string(nodes[0]->port()));
  const std::string master_id = master->Cli("CLUSTER MYID");
  // CLUSTER REPLICATE fails until the replica knows the master.
  ASSERT_TRUE(WaitUntil([&] { return replica->Cli("CLUSTER REPLICATE " + master_id) == "OK"; },
                        std::chrono::seconds(10), std::chrono::milliseconds(50)));
  // Synced, and aware of its master's slots (from the cluster bus, which may lag replication).
  const bool synced = WaitUntil(
      [&] {
        return replica->Cli("INFO replication").find("master_link_status:up") !=
                   std::string::npos &&
               KnowsSlotsOf(*replica, master_id);
      },
      std::chrono::seconds(10), std::chrono::milliseconds(50));
  ASSERT_TRUE(synced) << replica->Cli("INFO replication");

  auto r = RedisStore::Create({.url = "redis-cluster://127.0.0.1:" + std::to_string(master->port()),
                               .prefix = "f",
                               .timeout_ms = 200});
  ASSERT_TRUE(r.ok()) << r.error();
  auto& store = **r;
  const Limit burst = Bucket(10);
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  const Batch batch{.scope = "key:failover", .checks = checks};
  std::vector<Decision> d(1);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(ApplySync(store, batch, d).error, StoreErrc::kOk);
  EXPECT_EQ(d[0].remaining, 7);
  // The replica has the bucket: it has read the master's replication stream up to its end.
  auto offset = [](const testing::RedisServer& node, const std::string& field) {
    const std::string info = node.Cli("INFO replication");
    const size_t at = info.find(field + ":");
    return at == std::string::npos ? -1 : std::stoll(info.substr(at + field.size() + 1));
  };
  const long long written = offset(*master, "master_repl_offset");
  WaitUntil([&] { return offset(*replica, "slave_repl_offset") >= written; },
            std::chrono::seconds(2), std::chrono::milliseconds(10));
  ASSERT_GE(offset(*replica, "slave_repl_offset"), written);

  master->Stop();
  replica->Cli("CLUSTER FAILOVER TAKEOVER");
  ApplyResult res;
  WaitUntil(
      [&] {
        res = ApplySync(store, batch, d);
        return res.error == StoreErrc::kOk;
      },
      std::chrono::seconds(20), std::chrono::milliseconds(100));
  ASSERT_EQ(res.error, StoreErrc::kOk) << res.message << " " << store.LastError();
  EXPECT_EQ(d[0].remaining, 6);  // the budget went on from the replica's copy
  EXPECT_EQ(replica->Cli("EXISTS " + key), "1");
}

// Redis's count of read events, summed over the nodes.
uint64_t ReadsProcessed(const std::vector<std::unique_ptr<testing::RedisServer>>& nodes) {
  uint64_t total = 0;
  for (auto& n : nodes) {
    const std::string info = n->Cli("INFO stats");
    const size_t at = info.find("total_reads_processed:");
    if (at != std::string::npos) total += std::stoull(info.substr(at + 22));
  }
  return total;
}

// Decisions of many identities issued at once leave together: a batch holds a script call for
// each slot, so a node gets them in a few writes, not two decisions per round trip.
TEST_F(ClusterTest, ManyIdentitiesLeaveInBatches) {
  auto owned = MakeStore("b");
  ASSERT_NE(owned, nullptr);
  auto& store = *owned;
  const Limit burst = Bucket(2);
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  std::vector<Decision> one(1);
  for (int k = 0; k < 30; ++k) {  // connects to every node
    ASSERT_EQ(
        ApplySync(store, Batch{.scope = "warm:" + std::to_string(k), .checks = checks}, one).error,
        StoreErrc::kOk);
  }
  constexpr int kIdentities = 300;
  std::vector<Decision> d(kIdentities);
  std::vector<std::promise<ApplyResult>> replies(kIdentities);
  const uint64_t reads_before = ReadsProcessed(nodes_);
  for (size_t i = 0; i < replies.size(); ++i) {
    store.Apply(Batch{.scope = "id:" + std::to_string(i), .checks = checks}, {&d[i], 1},
                [&replies, i](ApplyResult&& res) { replies[i].set_value(std::move(res)); });
  }
  int committed = 0;
  for (auto& reply : replies) {
    const ApplyResult res = reply.get_future().get();
    EXPECT_EQ(res.error, StoreErrc::kOk) << res.message;
    committed += res.committed;
  }
  EXPECT_EQ(committed, kIdentities);
  // Two per round trip would take at least 150 reads on three nodes; the INFO calls take 6.
  EXPECT_LT(ReadsProcessed(nodes_) - reads_before, 60u);
}

// rediss-cluster://: every node over TLS (`tls-cluster yes`, so the slot map names TLS ports).
TEST(TlsCluster, LimitsHoldWithEveryNodeOverTls) {
  testing::TlsCerts certs;
  std::vector<std::unique_ptr<testing::RedisServer>> nodes;
  std::string create = "--tls --cacert " + certs.File("ca.crt") + " --cluster create";
  int first_tls_port = 0;
  for (int i = 0; i < 3; ++i) {
    // Ports whose cluster bus ports (+10000) are free, none of them handed out twice.
    const int plain = testing::FreeClusterPort();
    const int tls = testing::FreeClusterPort();
    std::vector<std::string> args = certs.RedisArgs(tls, false);
    args.insert(args.end(),
                {"--tls-cluster", "yes", "--cluster-enabled", "yes", "--cluster-config-file",
                 "nodes.conf", "--cluster-node-timeout", "2000"});
    nodes.push_back(std::make_unique<testing::RedisServer>(args, plain));
    create += " 127.0.0.1:" + std::to_string(tls);
    if (i == 0) first_tls_port = tls;
  }
  nodes[0]->Cli(create + " --cluster-replicas 0 --cluster-yes");
  ASSERT_TRUE(WaitClusterReady(nodes)) << "cluster did not become ready";

  auto r =
      RedisStore::Create({.url = "rediss-cluster://127.0.0.1:" + std::to_string(first_tls_port),
                          .prefix = "tc",
                          .timeout_ms = 2000,
                          .tls_ca_file = certs.File("ca.crt")});
  ASSERT_TRUE(r.ok()) << r.error();
  auto& store = **r;
  const Limit burst = Bucket(3);
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  std::vector<Decision> d(1);
  for (int k = 0; k < 30; ++k) {
    const std::string scope = "key:" + std::to_string(k);
    int accepted = 0;
    for (int i = 0; i < 5; ++i) {
      const ApplyResult res = ApplySync(store, Batch{.scope = scope, .checks = checks}, d);
      ASSERT_EQ(res.error, StoreErrc::kOk) << res.message << " " << store.LastError();
      accepted += res.committed;
    }
    EXPECT_EQ(accepted, 3) << scope;
  }
  // The identities' keys are spread over the three masters.
  for (auto& n : nodes) EXPECT_NE(n->Cli("DBSIZE"), "0");
}

}  // namespace
}  // namespace tollgate::store
