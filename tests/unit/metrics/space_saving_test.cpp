// The Space-Saving sketch's published bound, checked on skewed streams against exact counts.
#include <tollgate/metrics/space_saving.hpp>

#include <cmath>
#include <map>
#include <random>

#include <gtest/gtest.h>

namespace tollgate::metrics {
namespace {

// A Zipf-like stream over `keys` keys (weight of key i proportional to 1 / (i + 1)^s).
std::vector<std::string> Stream(size_t n, size_t keys, double s, uint32_t seed) {
  std::vector<double> w(keys);
  for (size_t i = 0; i < keys; ++i) w[i] = 1.0 / std::pow(static_cast<double>(i + 1), s);
  std::discrete_distribution<size_t> pick(w.begin(), w.end());
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back("k" + std::to_string(pick(rng)));
  return out;
}

void ExpectTheBound(const SpaceSaving& sketch, const std::map<std::string, uint64_t>& exact) {
  const uint64_t bound = sketch.total() / sketch.capacity();
  const auto top = sketch.Top(sketch.capacity());
  std::map<std::string, const SpaceSaving::Item*> held;
  for (const auto& item : top) held[item.key] = &item;
  for (const auto& item : top) {
    const uint64_t truth = exact.count(item.key) ? exact.at(item.key) : 0;
    EXPECT_LE(item.count - item.error, truth) << item.key;
    EXPECT_GE(item.count, truth) << item.key;
    EXPECT_LE(item.error, bound) << item.key;
  }
  for (const auto& [key, truth] : exact) {
    if (truth > bound) {
      EXPECT_TRUE(held.count(key)) << key << " " << truth << " > " << bound;
    }
  }
}

TEST(SpaceSaving, HoldsItsBoundOnASkewedStream) {
  for (double s : {0.8, 1.1, 1.5}) {
    SpaceSaving sketch(64);
    std::map<std::string, uint64_t> exact;
    for (const std::string& k : Stream(100'000, 5'000, s, 7)) {
      sketch.Add(k);
      ++exact[k];
    }
    EXPECT_EQ(sketch.total(), 100'000u);
    ExpectTheBound(sketch, exact);
    // The heaviest key is found and ranked first.
    EXPECT_EQ(sketch.Top(1)[0].key, "k0") << s;
  }
}

TEST(SpaceSaving, HoldsItsBoundWhenNearlyEveryAddEvicts) {
  // The gateway's worst case: many keys drawn uniformly, so the counters sit at the smallest
  // count or one above it, and the search for the smallest restarts from a risen floor. Three
  // heavy keys are mixed in, one of them only in the second half.
  SpaceSaving sketch(128);
  std::map<std::string, uint64_t> exact;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> pick(0, 9'999);
  for (int i = 0; i < 200'000; ++i) {
    std::string k = i % 40 == 0                  ? "heavy-a"
                    : i % 55 == 0                ? "heavy-b"
                    : i > 100'000 && i % 70 == 0 ? "late"
                                                 : "k" + std::to_string(pick(rng));
    const uint64_t weight = i % 1000 == 0 ? 3 : 1;
    sketch.Add(k, weight);
    exact[k] += weight;
  }
  ExpectTheBound(sketch, exact);
  const auto top = sketch.Top(3);
  EXPECT_EQ(top[0].key, "heavy-a");
  EXPECT_EQ(top[1].key, "heavy-b");
  EXPECT_EQ(top[2].key, "late");
}

TEST(SpaceSaving, MergedSketchesOfDisjointStreamsKeepTheBound) {
  SpaceSaving a(32), b(32);
  std::map<std::string, uint64_t> exact;
  const auto one = Stream(40'000, 2'000, 1.2, 1), two = Stream(60'000, 2'000, 1.0, 2);
  for (const auto& k : one) a.Add(k), ++exact[k];
  for (const auto& k : two) b.Add(k), ++exact[k];
  a.Merge(b);
  EXPECT_EQ(a.total(), 100'000u);
  ExpectTheBound(a, exact);
}

TEST(SpaceSaving, IsExactBelowItsCapacityAndWeightsCount) {
  SpaceSaving sketch(8);
  sketch.Add("a", 5);
  sketch.Add("b");
  sketch.Add("a", 2);
  const auto top = sketch.Top(8);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ((std::pair{top[0].key, top[0].count}), (std::pair{std::string("a"), uint64_t{7}}));
  EXPECT_EQ(top[0].error, 0u);
  EXPECT_EQ(top[1].count, 1u);
  sketch.Clear();
  EXPECT_TRUE(sketch.Top(8).empty());
}

}  // namespace
}  // namespace tollgate::metrics
