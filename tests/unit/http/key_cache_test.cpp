#include "http/key_cache.hpp"

#include <memory>
#include <string>

#include <gtest/gtest.h>

namespace tollgate::http {
namespace {

// A policy of two plans and one key, `k-1`, on plan `plan`.
std::shared_ptr<const policy::Policy> PolicyWith(const std::string& plan) {
  auto c = config::ParseConfig(
      "plans: {free: {limits: [{name: burst, capacity: 20, refill_per_second: 0.5}]},\n"
      "        team: {limits: [{name: burst, capacity: 200, refill_per_second: 5}]}}\n"
      "keys: [{key: k-1, id: one, plan: " +
      plan + "}]\n");
  EXPECT_TRUE(c.ok()) << c.error();
  auto p = policy::Policy::Build(std::move(c).value());
  EXPECT_TRUE(p.ok()) << p.error();
  return *p;
}

TEST(KeyCache, ResolvesKnownAndUnknownKeys) {
  const auto pol = PolicyWith("free");
  KeyCache cache;
  const policy::Key* k = cache.Find(*pol, 1, "k-1");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->id, "one");
  EXPECT_EQ(cache.Find(*pol, 1, "k-unknown"), nullptr);
  EXPECT_EQ(cache.size(), 2u);  // an unknown key is cached too: a flood of it is hashed once
}

TEST(KeyCache, AnswersFromTheCacheWithinAGeneration) {
  const auto free = PolicyWith("free");
  const auto team = PolicyWith("team");
  KeyCache cache;
  const policy::Key* first = cache.Find(*free, 1, "k-1");
  // Under the same generation the policy is not asked again.
  EXPECT_EQ(cache.Find(*team, 1, "k-1"), first);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(KeyCache, AnotherGenerationStartsOver) {
  const auto free = PolicyWith("free");
  const auto team = PolicyWith("team");
  KeyCache cache;
  cache.Find(*free, 1, "k-1");
  cache.Find(*free, 1, "k-2");
  const policy::Key* k = cache.Find(*team, 2, "k-1");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->plan->name, "team");
  EXPECT_EQ(cache.size(), 1u);  // k-2 of generation 1 is gone
}

TEST(KeyCache, StartsOverPastItsBound) {
  const auto free = PolicyWith("free");
  const auto team = PolicyWith("team");
  KeyCache cache;
  cache.Find(*free, 1, "k-1");
  for (size_t i = 1; i < KeyCache::kMaxCachedKeys; ++i) cache.Find(*free, 1, std::to_string(i));
  EXPECT_EQ(cache.size(), KeyCache::kMaxCachedKeys);
  // Exact up to the bound: every key is still there.
  EXPECT_EQ(cache.Find(*team, 1, "k-1")->plan->name, "free");
  EXPECT_EQ(cache.size(), KeyCache::kMaxCachedKeys);
  // One more key: the cache starts over with it alone.
  EXPECT_EQ(cache.Find(*free, 1, "one more"), nullptr);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.Find(*team, 1, "k-1")->plan->name, "team");
}

}  // namespace
}  // namespace tollgate::http
