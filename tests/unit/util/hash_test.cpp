#include <tollgate/util/hash.hpp>

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tollgate::util {
namespace {

TEST(Hash64, TheSameSeedGivesTheSameHash) {
  EXPECT_EQ(Hash64("key:424242", 7), Hash64("key:424242", 7));
  EXPECT_EQ(Hash64("ip:2001:db8::/64"), Hash64("ip:2001:db8::/64"));
  EXPECT_EQ(Hash64(""), Hash64(""));
}

TEST(Hash64, TwoSeedsGiveDifferentHashes) {
  for (const std::string& s :
       std::vector<std::string>{"", "a", "key:424242", "ip:203.0.113.7", std::string(300, 'x')}) {
    EXPECT_NE(Hash64(s, 1), Hash64(s, 2)) << s;
    EXPECT_NE(Hash64(s), Hash64(s, 0x9e3779b97f4a7c15ull)) << s;
  }
}

TEST(Hash64, TheProcessSeedIsRandomAndFixed) {
  EXPECT_NE(ProcessSeed(), 0u);
  EXPECT_EQ(ProcessSeed(), ProcessSeed());
  // Hash64 is XXH3 under the process seed: without it, a client could compute the hash offline.
  EXPECT_EQ(Hash64("key:a"), XXH3_64bits_withSeed("key:a", 5, ProcessSeed()));
  EXPECT_NE(Hash64("key:a"), XXH3_64bits_withSeed("key:a", 5, 0));
}

TEST(Hash128, SeededLikeHash64) {
  const Hash128Value a = Hash128("key:424242", 7);
  const Hash128Value b = Hash128("key:424242", 7);
  EXPECT_EQ(a.low, b.low);
  EXPECT_EQ(a.high, b.high);
  EXPECT_NE(a.low, a.high);
  EXPECT_NE(Hash128("key:424242", 8).low, a.low);
  const XXH128_hash_t x = XXH3_128bits_withSeed("key:a", 5, ProcessSeed());
  EXPECT_EQ(Hash128("key:a").low, x.low64);
  EXPECT_EQ(Hash128("key:a").high, x.high64);
}

TEST(Hash64, DistinctShortKeysDoNotCollide) {
  std::set<uint64_t> seen;
  for (int i = 0; i < 100'000; ++i) seen.insert(Hash64("key:" + std::to_string(i)));
  EXPECT_EQ(seen.size(), 100'000u);
}

}  // namespace
}  // namespace tollgate::util
