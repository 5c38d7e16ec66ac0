#include "store/redis/cluster.hpp"

#include <gtest/gtest.h>

namespace tollgate::store::redis {
namespace {

// Slots as Redis Cluster computes them (the cluster specification's examples and
// `CLUSTER KEYSLOT`).
TEST(KeySlot, IsCrc16OfTheKeyModuloTheSlotCount) {
  EXPECT_EQ(Crc16("123456789"), 0x31C3);  // the CRC16-CCITT (XMODEM) check value
  EXPECT_EQ(HashSlot("foo"), 12182);
  EXPECT_EQ(HashSlot("bar"), 5061);
  EXPECT_EQ(HashSlot("hello"), 866);
  EXPECT_EQ(HashSlot("somekey"), 11058);
  EXPECT_EQ(HashSlot(""), 0);
}

TEST(KeySlot, AHashTagChoosesTheSlot) {
  EXPECT_EQ(HashSlot("{user1000}.following"), HashSlot("user1000"));
  EXPECT_EQ(HashSlot("{user1000}.followers"), HashSlot("user1000"));
  EXPECT_EQ(HashSlot("tollgate:{key:abc}:burst:tb"), HashSlot("key:abc"));
  EXPECT_EQ(HashSlot("foo{bar}{zap}"), HashSlot("bar"));      // the first tag
  EXPECT_EQ(HashSlot("foo{{bar}}zap"), HashSlot("{bar"));     // up to the first '}'
  EXPECT_EQ(HashSlot("foo{}{bar}"), HashSlot("foo{}{bar}"));  // an empty tag: the whole key
  EXPECT_EQ(HashSlot("foo{}{bar}"), 8363);
  EXPECT_EQ(HashSlot("foo{bar"), HashSlot("foo{bar"));  // unclosed: the whole key
  EXPECT_NE(HashSlot("foo{bar"), HashSlot("bar"));
}

TEST(Redirect, MovedAndAskNameTheNode) {
  const NodeAddress from{"10.0.0.1", "7000"};
  auto moved = ParseRedirect("MOVED 3999 127.0.0.1:6381", from);
  ASSERT_TRUE(moved.has_value());
  EXPECT_TRUE(moved->moved);
  EXPECT_EQ(moved->node, (NodeAddress{"127.0.0.1", "6381"}));
  auto ask = ParseRedirect("ASK 3999 redis-2.internal:7002", from);
  ASSERT_TRUE(ask.has_value());
  EXPECT_FALSE(ask->moved);
  EXPECT_EQ(ask->node, (NodeAddress{"redis-2.internal", "7002"}));
  auto v6 = ParseRedirect("MOVED 1 ::1:7003", from);
  ASSERT_TRUE(v6.has_value());
  EXPECT_EQ(v6->node, (NodeAddress{"::1", "7003"}));
}

// Regression: Redis 7 writes "MOVED 3999 :6380" (same host, this port) when the cluster's
// preferred endpoint type is unknown; the empty host was refused, so the redirect failed as a
// protocol error instead of being followed.
TEST(Redirect, AnEmptyHostIsTheNodeThatAnswered) {
  const auto r = ParseRedirect("MOVED 3999 :6380", NodeAddress{"10.0.0.7", "6379"});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->node.host, "10.0.0.7");
  EXPECT_EQ(r->node.port, "6380");
}

TEST(Redirect, OtherErrorsAreNotRedirects) {
  const NodeAddress from{"h", "1"};
  for (const char* err : {"ERR unknown command", "NOSCRIPT No matching script", "MOVED", "ASK",
                          "MOVEDX 1 h:2", "TRYAGAIN Multiple keys request during rehashing of slot",
                          "MOVED 3999 nohostport", "ASK 3999 h:"}) {
    EXPECT_FALSE(ParseRedirect(err, from).has_value()) << err;
  }
}

TEST(Redirect, TryAgainIsAPrefix) {
  EXPECT_TRUE(IsTryAgain("TRYAGAIN Multiple keys request during rehashing of slot"));
  EXPECT_FALSE(IsTryAgain("ERR TRYAGAIN"));
  EXPECT_FALSE(IsTryAgain("MOVED 1 h:2"));
}

RedisValue Array(std::vector<RedisValue> items) { return RedisValue{std::move(items)}; }
RedisValue Text(std::string s) { return RedisValue{std::move(s)}; }
RedisValue Int(long long i) { return RedisValue{i}; }

// CLUSTER SLOTS of three masters, each with a replica; the second master's host is empty
// ("the node you asked").
RedisValue ThreeMasters() {
  return Array({
      Array({Int(0), Int(5460), Array({Text("127.0.0.1"), Int(7000), Text("id-a")}),
             Array({Text("127.0.0.1"), Int(7100), Text("id-ra")})}),
      Array({Int(5461), Int(10922), Array({Text(""), Int(7001), Text("id-b")})}),
      Array({Int(10923), Int(16383), Array({Text("127.0.0.1"), Int(7002)})}),
  });
}

TEST(SlotMap, FromClusterSlotsNamesTheMasterOfEverySlot) {
  auto map = SlotMap::FromClusterSlots(ThreeMasters(), "10.1.1.1");
  ASSERT_TRUE(map.has_value());
  const NodeAddress a{"127.0.0.1", "7000"};
  const NodeAddress b{"10.1.1.1", "7001"};
  const NodeAddress c{"127.0.0.1", "7002"};
  EXPECT_EQ(map->masters(), (std::vector<NodeAddress>{a, b, c}));
  for (const auto& [slot, owner] :
       {std::pair{0, a}, std::pair{5460, a}, std::pair{5461, b}, std::pair{10922, b},
        std::pair{10923, c}, std::pair{16383, c}}) {
    ASSERT_NE(map->Owner(slot), nullptr) << slot;
    EXPECT_EQ(*map->Owner(slot), owner) << slot;
  }
}

TEST(SlotMap, SlotsNoRangeCoversAreUnknown) {
  const RedisValue reply = Array({Array({Int(100), Int(199), Array({Text("h"), Int(1)})})});
  auto map = SlotMap::FromClusterSlots(reply, "asked");
  ASSERT_TRUE(map.has_value());
  EXPECT_EQ(map->Owner(99), nullptr);
  EXPECT_NE(map->Owner(100), nullptr);
  EXPECT_NE(map->Owner(199), nullptr);
  EXPECT_EQ(map->Owner(200), nullptr);
  EXPECT_EQ(SlotMap().Owner(0), nullptr);
}

TEST(SlotMap, OnlyANonEmptyArrayIsAMap) {
  EXPECT_FALSE(SlotMap::FromClusterSlots(Array({}), "h").has_value());
  EXPECT_FALSE(
      SlotMap::FromClusterSlots(
          RedisValue{RedisValue::Error{"ERR This instance has cluster support disabled"}}, "h")
          .has_value());
  EXPECT_FALSE(SlotMap::FromClusterSlots(RedisValue{}, "h").has_value());
  EXPECT_FALSE(SlotMap::FromClusterSlots(Int(1), "h").has_value());
}

// Ranges without a master, or a master without host and port, are skipped; the others count.
TEST(SlotMap, MalformedRangesAreSkipped) {
  const RedisValue reply = Array({
      Int(7),
      Array({Int(0), Int(10)}),
      Array({Int(0), Int(10), Text("not an array")}),
      Array({Int(0), Int(10), Array({Text("only-host")})}),
      Array({Int(20), Int(30), Array({Text("h"), Int(2)})}),
  });
  auto map = SlotMap::FromClusterSlots(reply, "asked");
  ASSERT_TRUE(map.has_value());
  EXPECT_EQ(map->masters(), (std::vector<NodeAddress>{{"h", "2"}}));
  EXPECT_EQ(map->Owner(5), nullptr);
  ASSERT_NE(map->Owner(25), nullptr);
}

TEST(SlotMap, RangesStopAtTheLastSlot) {
  const RedisValue reply = Array({Array({Int(16380), Int(99999), Array({Text("h"), Int(1)})})});
  auto map = SlotMap::FromClusterSlots(reply, "asked");
  ASSERT_TRUE(map.has_value());
  EXPECT_NE(map->Owner(kSlots - 1), nullptr);
  EXPECT_EQ(map->Owner(16379), nullptr);
}

// Regression: a negative range start wrote before the slot table (found in the split).
TEST(SlotMap, RangesStartAtTheFirstSlot) {
  const RedisValue reply = Array({Array({Int(-5), Int(3), Array({Text("h"), Int(1)})})});
  auto map = SlotMap::FromClusterSlots(reply, "asked");
  ASSERT_TRUE(map.has_value());
  EXPECT_NE(map->Owner(0), nullptr);
  EXPECT_NE(map->Owner(3), nullptr);
  EXPECT_EQ(map->Owner(4), nullptr);
}

TEST(SlotMap, MovedAssignsOneSlot) {
  auto map = SlotMap::FromClusterSlots(ThreeMasters(), "10.1.1.1");
  ASSERT_TRUE(map.has_value());
  const NodeAddress d{"127.0.0.1", "7003"};
  map->Assign(42, d);
  EXPECT_EQ(*map->Owner(42), d);
  EXPECT_EQ(*map->Owner(41), (NodeAddress{"127.0.0.1", "7000"}));
  EXPECT_EQ(map->masters().size(), 4u);
  map->Assign(43, d);  // a master already named is not named twice
  EXPECT_EQ(map->masters().size(), 4u);
}

TEST(SlotMap, CandidatesAreTheSeedsThenTheOtherMasters) {
  auto map = SlotMap::FromClusterSlots(ThreeMasters(), "10.1.1.1");
  ASSERT_TRUE(map.has_value());
  const std::vector<NodeAddress> seeds = {{"127.0.0.1", "7002"}, {"seed", "1"}};
  EXPECT_EQ(
      TopologyCandidates(seeds, *map),
      (std::vector<NodeAddress>{
          {"127.0.0.1", "7002"}, {"seed", "1"}, {"127.0.0.1", "7000"}, {"10.1.1.1", "7001"}}));
  EXPECT_EQ(TopologyCandidates(seeds, SlotMap()), seeds);
}

}  // namespace
}  // namespace tollgate::store::redis
