#include "http/rejection_cache.hpp"

#include <string>

#include <gtest/gtest.h>

namespace tollgate::http {
namespace {

// Renders "<status> <facts>" and counts its calls.
struct Renderer {
  int calls = 0;
  auto For(const std::string& facts, int status) {
    return [this, facts, status](std::string& out) {
      ++calls;
      out.assign(std::to_string(status)).append(" ").append(facts);
      return status;
    };
  }
};

class RejectionCacheTest : public ::testing::Test {
 protected:
  RejectionCache cache;
  Renderer r;
  std::string facts;
};

TEST_F(RejectionCacheTest, TheSameFactsAreRenderedOnce) {
  facts = "burst:0:26";
  const RejectionCache::Response first = cache.Get(facts, r.For("burst:0:26", 429));
  EXPECT_EQ(first.bytes, "429 burst:0:26");
  EXPECT_EQ(first.status, 429);
  facts = "burst:0:26";
  const RejectionCache::Response again = cache.Get(facts, r.For("unused", 500));
  EXPECT_EQ(again.bytes, "429 burst:0:26");
  EXPECT_EQ(again.status, 429);
  EXPECT_EQ(r.calls, 1);
}

TEST_F(RejectionCacheTest, OtherFactsAreRenderedAnew) {
  facts = "burst:0:26";
  cache.Get(facts, r.For("a", 429));
  // One byte more (the connection's keep-alive, say) is another response.
  facts = std::string("burst:0:26") + '\1';
  const RejectionCache::Response other = cache.Get(facts, r.For("b", 403));
  EXPECT_EQ(other.bytes, "403 b");
  EXPECT_EQ(other.status, 403);
  EXPECT_EQ(r.calls, 2);
}

TEST_F(RejectionCacheTest, OnlyTheLastRejectionIsKept) {
  for (const char* f : {"a", "b", "a"}) {
    facts = f;
    cache.Get(facts, r.For(f, 429));
  }
  EXPECT_EQ(r.calls, 3);
  facts = "a";
  EXPECT_EQ(cache.Get(facts, r.For("x", 429)).bytes, "429 a");
  EXPECT_EQ(r.calls, 3);
}

TEST_F(RejectionCacheTest, AMissTakesTheFactsAndGivesBackTheOldOnes) {
  facts = "first";
  cache.Get(facts, r.For("1", 429));
  EXPECT_EQ(facts, "");  // the cache's empty facts
  facts = "second";
  cache.Get(facts, r.For("2", 429));
  EXPECT_EQ(facts, "first");
}

}  // namespace
}  // namespace tollgate::http
