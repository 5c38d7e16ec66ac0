#include "http/identity_budget.hpp"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace tollgate::http {
namespace {

TEST(IdentityBudget, OneIdentityIsHeldToItsBound) {
  IdentityBudget budget(100, 2);
  EXPECT_TRUE(budget.Reserve("key:a"));
  EXPECT_TRUE(budget.Reserve("key:a"));
  EXPECT_FALSE(budget.Reserve("key:a"));
  EXPECT_TRUE(budget.Reserve("key:b"));
  EXPECT_EQ(budget.ReservedBy("key:a"), 2u);
  EXPECT_EQ(budget.Reserved(), 3u);  // a refusal reserves nothing
  budget.Release("key:a");
  EXPECT_TRUE(budget.Reserve("key:a"));
}

TEST(IdentityBudget, TheTotalIsHeldToItsBound) {
  IdentityBudget budget(2, 10);
  EXPECT_TRUE(budget.Reserve("a"));
  EXPECT_TRUE(budget.Reserve("b"));
  EXPECT_FALSE(budget.Reserve("c"));
  EXPECT_EQ(budget.ReservedBy("c"), 0u);
  budget.Release("b");
  EXPECT_TRUE(budget.Reserve("c"));
  EXPECT_EQ(budget.Reserved(), 2u);
}

TEST(IdentityBudget, ARefusalSaysWhichBoundWasReached) {
  IdentityBudget budget(2, 1);
  EXPECT_EQ(budget.TryReserve("a"), IdentityBudget::Refusal::kNone);
  EXPECT_EQ(budget.TryReserve("a"), IdentityBudget::Refusal::kIdentity);
  EXPECT_EQ(budget.TryReserve("b"), IdentityBudget::Refusal::kNone);
  EXPECT_EQ(budget.TryReserve("c"), IdentityBudget::Refusal::kTotal);
  EXPECT_EQ(budget.TryReserve("a"), IdentityBudget::Refusal::kTotal);  // the total first
}

TEST(IdentityBudget, NoHoldingAtAllWhenABoundIsZero) {
  IdentityBudget none_per_identity(10, 0);
  EXPECT_FALSE(none_per_identity.Reserve("a"));
  EXPECT_EQ(none_per_identity.Reserved(), 0u);
  IdentityBudget none(0, 10);
  EXPECT_FALSE(none.Reserve("a"));
}

TEST(IdentityBudget, ReleasingWhatIsNotHeldChangesNothing) {
  IdentityBudget budget(1, 1);
  budget.Release("a");
  EXPECT_EQ(budget.Reserved(), 0u);
  EXPECT_TRUE(budget.Reserve("a"));
  budget.Release("b");
  EXPECT_EQ(budget.Reserved(), 1u);
  budget.Release("a");
  budget.Release("a");
  EXPECT_EQ(budget.Reserved(), 0u);
  EXPECT_TRUE(budget.Reserve("b"));
}

TEST(IdentityBudget, WorkersShareItExactly) {
  IdentityBudget budget(50, 1000);
  std::atomic<int> reserved{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        if (budget.Reserve("one")) reserved.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(reserved.load(), 50);
  EXPECT_EQ(budget.ReservedBy("one"), 50u);
}

}  // namespace
}  // namespace tollgate::http
