#include "store/redis/url.hpp"

#include <gtest/gtest.h>

namespace tollgate::store::redis {
namespace {

// The error of a URL that must not parse ("" if it parsed).
std::string ErrorOf(std::string_view url) {
  auto parsed = ParseUrl(url);
  return parsed ? "" : parsed.error();
}

TEST(RedisUrl, StandaloneIsOneHostAndPort) {
  auto url = ParseUrl("redis://127.0.0.1:6379");
  ASSERT_TRUE(url.ok()) << url.error();
  EXPECT_FALSE(url->cluster);
  EXPECT_FALSE(url->tls);
  ASSERT_EQ(url->nodes.size(), 1u);
  EXPECT_EQ(url->nodes[0], (NodeAddress{"127.0.0.1", "6379"}));
  EXPECT_EQ(url->user, "");
  EXPECT_EQ(url->password, "");
  EXPECT_EQ(url->db, 0);
}

TEST(RedisUrl, EachSchemeSetsClusterAndTls) {
  struct Case {
    const char* url;
    bool cluster;
    bool tls;
  };
  for (const Case& c :
       {Case{"redis://h:1", false, false}, Case{"rediss://h:1", false, true},
        Case{"redis-cluster://h:1", true, false}, Case{"rediss-cluster://h:1", true, true}}) {
    auto url = ParseUrl(c.url);
    ASSERT_TRUE(url.ok()) << c.url << ": " << url.error();
    EXPECT_EQ(url->cluster, c.cluster) << c.url;
    EXPECT_EQ(url->tls, c.tls) << c.url;
    EXPECT_EQ(url->nodes, (std::vector<NodeAddress>{{"h", "1"}})) << c.url;
  }
}

TEST(RedisUrl, OtherSchemesAreRefused) {
  for (const char* url : {"http://h:1", "redis:/h:1", "REDIS://h:1", "h:1", ""}) {
    EXPECT_NE(ErrorOf(url).find("store.url: must start with redis://"), std::string::npos) << url;
  }
}

TEST(RedisUrl, CredentialsAreAPasswordOrAUserAndPassword) {
  auto password = ParseUrl("redis://secret@h:1");
  ASSERT_TRUE(password.ok()) << password.error();
  EXPECT_EQ(password->user, "");
  EXPECT_EQ(password->password, "secret");
  auto both = ParseUrl("rediss://alice:s3:cr3t@h:1");
  ASSERT_TRUE(both.ok()) << both.error();
  EXPECT_EQ(both->user, "alice");
  EXPECT_EQ(both->password, "s3:cr3t");  // the user ends at the first ':'
  auto at_sign = ParseUrl("redis://alice:p@ss@h:1");
  ASSERT_TRUE(at_sign.ok()) << at_sign.error();
  EXPECT_EQ(at_sign->password, "p@ss");  // the credentials end at the last '@'
  EXPECT_EQ(at_sign->nodes[0].host, "h");
  auto empty_user = ParseUrl("redis://:pw@h:1");
  ASSERT_TRUE(empty_user.ok()) << empty_user.error();
  EXPECT_EQ(empty_user->user, "");
  EXPECT_EQ(empty_user->password, "pw");
}

TEST(RedisUrl, DatabaseNumber) {
  auto db = ParseUrl("redis://user:pw@h:1/3");
  ASSERT_TRUE(db.ok()) << db.error();
  EXPECT_EQ(db->db, 3);
  EXPECT_EQ(db->nodes[0], (NodeAddress{"h", "1"}));
  auto empty = ParseUrl("redis://h:1/");
  ASSERT_TRUE(empty.ok()) << empty.error();
  EXPECT_EQ(empty->db, 0);
  for (const char* bad : {"redis://h:1/x", "redis://h:1/-1", "redis://h:1/3x", "redis://h:1/ 3"}) {
    EXPECT_NE(ErrorOf(bad).find("store.url: bad database number"), std::string::npos) << bad;
  }
}

TEST(RedisUrl, ClusterHasOnlyDatabaseZero) {
  EXPECT_EQ(ErrorOf("redis-cluster://h:1/1"), "store.url: Redis Cluster has only database 0");
  EXPECT_EQ(ErrorOf("redis-cluster://h:1/0"), "");
}

TEST(RedisUrl, ClusterTakesSeveralSeedsStandaloneOne) {
  auto url = ParseUrl("redis-cluster://a:1,b:2,c:3");
  ASSERT_TRUE(url.ok()) << url.error();
  EXPECT_EQ(url->nodes, (std::vector<NodeAddress>{{"a", "1"}, {"b", "2"}, {"c", "3"}}));
  EXPECT_EQ(ErrorOf("redis://a:1,b:2"), "store.url: one host for redis://");
}

TEST(RedisUrl, EveryNodeIsHostAndPort) {
  EXPECT_EQ(ErrorOf("redis://nohostport"), "store.url: expected host:port, got 'nohostport'");
  EXPECT_EQ(ErrorOf("redis://:6379"), "store.url: expected host:port, got ':6379'");
  EXPECT_EQ(ErrorOf("redis://h:"), "store.url: expected host:port, got 'h:'");
  EXPECT_EQ(ErrorOf("redis-cluster://a:1,b"), "store.url: expected host:port, got 'b'");
  EXPECT_EQ(ErrorOf("redis://"), "store.url: no host");
  EXPECT_EQ(ErrorOf("redis://pw@"), "store.url: no host");
}

TEST(RedisUrl, HostPortSplitsAtTheLastColon) {
  auto v6 = ParseHostPort("::1:6379");
  ASSERT_TRUE(v6.ok()) << v6.error();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, "6379");
  auto bracketed = ParseHostPort("[::1]:6379");
  ASSERT_TRUE(bracketed.ok()) << bracketed.error();
  EXPECT_EQ(bracketed->host, "::1");
  auto name = ParseHostPort("redis.internal:7000");
  ASSERT_TRUE(name.ok()) << name.error();
  EXPECT_EQ(*name, (NodeAddress{"redis.internal", "7000"}));
}

TEST(RedisUrl, NodeAddressesOrderByHostThenPort) {
  EXPECT_LT((NodeAddress{"a", "2"}), (NodeAddress{"b", "1"}));
  EXPECT_LT((NodeAddress{"a", "1"}), (NodeAddress{"a", "2"}));
  EXPECT_FALSE((NodeAddress{"a", "1"}) < (NodeAddress{"a", "1"}));
}

}  // namespace
}  // namespace tollgate::store::redis
