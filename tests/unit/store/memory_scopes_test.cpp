// Batches whose checks live in several scopes (route limits, issue 20): the memory store locks
// every shard involved and decides them all-or-nothing, exactly under concurrency.
#include <tollgate/store/memory_store.hpp>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/fake_clock.hpp"
#include "support/limits.hpp"

namespace tollgate::store {
namespace {

using core::Decision;
using core::Limit;
using testing::Bucket;

TEST(MemoryStoreScopes, ManyCallersTakeExactlyTheSharedBudget) {
  testing::FakeClock clock;  // frozen: nothing refills
  MemoryStore store(MemoryStoreOptions{.max_keys = 10'000, .shards = 16}, clock);
  const Limit own = Bucket(1'000, "0.001");
  const Limit shared = Bucket(3'000, "0.001");
  const Limit per_address = Bucket(100'000, "0.001");
  std::atomic<int> accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<Decision> out(3);
      for (int i = 0; i < 5'000; ++i) {
        const std::string key = "key:" + std::to_string((t * 5'000 + i) % 64);
        const std::string address = "ip:" + std::to_string(i % 7);
        const std::vector<Check> checks = {{"burst", &own, 1, true, ""},
                                           {"route:upstream", &shared, 1, true, "global"},
                                           {"route:addr", &per_address, 1, true, address}};
        if (store.ApplyNow(Batch{.scope = key, .checks = checks}, out).committed) {
          accepted.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(accepted.load(), 3'000);
}

TEST(MemoryStoreScopes, ARejectionInOneScopeChangesNoOther) {
  testing::FakeClock clock;
  MemoryStore store(MemoryStoreOptions{.max_keys = 1'000, .shards = 8}, clock);
  const Limit roomy = Bucket(10, "0.001");
  const Limit one = Bucket(1, "0.001");
  std::vector<Decision> out(3);
  const std::vector<Check> checks = {{"burst", &roomy, 1, true, ""},
                                     {"route:addr", &roomy, 1, true, "ip:a"},
                                     {"route:upstream", &one, 1, true, "global"}};
  ASSERT_TRUE(store.ApplyNow({.scope = "key:1", .checks = checks}, out).committed);
  const ApplyResult second = store.ApplyNow({.scope = "key:2", .checks = checks}, out);
  EXPECT_FALSE(second.committed);
  EXPECT_TRUE(out[0].allowed);
  EXPECT_TRUE(out[1].allowed);
  EXPECT_FALSE(out[2].allowed);
  // The allowed checks report their state as it is (not after a debit that did not happen).
  EXPECT_EQ(out[0].remaining, 10);
  EXPECT_EQ(out[1].remaining, 9);  // key:1 took one from the address's bucket
  // A shadow check that rejects blocks nothing, across scopes too.
  const std::vector<Check> shadow = {{"burst", &roomy, 1, true, ""},
                                     {"route:upstream", &one, 1, false, "global"}};
  EXPECT_TRUE(store.ApplyNow({.scope = "key:2", .checks = shadow}, out).committed);
  EXPECT_FALSE(out[1].allowed);
  // Peeks change nothing anywhere.
  const std::vector<Check> peek = {{"burst", &roomy, 1, true, ""},
                                   {"route:addr", &roomy, 1, true, "ip:a"}};
  std::vector<Decision> before(2), after(2);
  store.ApplyNow({.scope = "key:3", .checks = peek, .mode = Mode::kPeek}, before);
  store.ApplyNow({.scope = "key:3", .checks = peek, .mode = Mode::kPeek}, after);
  EXPECT_EQ(before[1].remaining, after[1].remaining);
  EXPECT_EQ(before[0].remaining, 10);
}

}  // namespace
}  // namespace tollgate::store
