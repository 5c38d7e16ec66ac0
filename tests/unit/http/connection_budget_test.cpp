#include "http/connection_budget.hpp"

#include <atomic>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace tollgate::http {
namespace {

TEST(ConnectionBudget, TheTotalIsHeldToItsLimit) {
  ConnectionBudget budget(2, 0);
  ConnectionSlot a, b, c;
  EXPECT_TRUE(budget.TakeTotal(a));
  EXPECT_TRUE(budget.TakeTotal(b));
  EXPECT_FALSE(budget.TakeTotal(c));
  EXPECT_EQ(budget.OpenApprox(), 2u);  // a refusal holds nothing
  EXPECT_FALSE(budget.LimitsAddresses());
}

TEST(ConnectionBudget, ADestroyedSlotGivesItsPlaceBack) {
  ConnectionBudget budget(1, 1);
  {
    ConnectionSlot a;
    ASSERT_TRUE(budget.TakeTotal(a));
    ASSERT_TRUE(budget.TakeAddress(a, "10.0.0.1"));
    EXPECT_EQ(budget.OpenFrom("10.0.0.1"), 1u);
    ConnectionSlot b;
    EXPECT_FALSE(budget.TakeTotal(b));
  }
  EXPECT_EQ(budget.OpenApprox(), 0u);
  EXPECT_EQ(budget.OpenFrom("10.0.0.1"), 0u);
  ConnectionSlot c;
  EXPECT_TRUE(budget.TakeTotal(c));
  EXPECT_TRUE(budget.TakeAddress(c, "10.0.0.1"));
}

TEST(ConnectionBudget, OneAddressIsHeldToItsLimit) {
  ConnectionBudget budget(100, 2);
  ASSERT_TRUE(budget.LimitsAddresses());
  ConnectionSlot a, b, c, other;
  EXPECT_TRUE(budget.TakeAddress(a, "10.0.0.1"));
  EXPECT_TRUE(budget.TakeAddress(b, "10.0.0.1"));
  EXPECT_FALSE(budget.TakeAddress(c, "10.0.0.1"));
  EXPECT_TRUE(budget.TakeAddress(other, "10.0.0.2"));
  EXPECT_EQ(budget.OpenFrom("10.0.0.1"), 2u);
  EXPECT_EQ(budget.OpenFrom("10.0.0.2"), 1u);
  { ConnectionSlot gone = std::move(a); }
  EXPECT_EQ(budget.OpenFrom("10.0.0.1"), 1u);
  EXPECT_TRUE(budget.TakeAddress(c, "10.0.0.1"));
}

TEST(ConnectionBudget, AMovedSlotHoldsThePlaceOnce) {
  ConnectionBudget budget(1, 1);
  std::optional<ConnectionSlot> moved;
  {
    ConnectionSlot slot;
    ASSERT_TRUE(budget.TakeTotal(slot));
    ASSERT_TRUE(budget.TakeAddress(slot, "10.0.0.1"));
    moved.emplace(std::move(slot));
  }  // the moved-from slot gives nothing back
  EXPECT_EQ(budget.OpenApprox(), 1u);
  EXPECT_EQ(budget.OpenFrom("10.0.0.1"), 1u);
  moved.reset();
  EXPECT_EQ(budget.OpenApprox(), 0u);
  EXPECT_EQ(budget.OpenFrom("10.0.0.1"), 0u);
}

TEST(ConnectionBudget, WorkersShareIt) {
  ConnectionBudget budget(1000, 10);
  std::vector<std::thread> threads;
  std::atomic<int> taken{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        ConnectionSlot slot;
        if (budget.TakeTotal(slot) && budget.TakeAddress(slot, "10.0.0.1")) {
          EXPECT_LE(budget.OpenFrom("10.0.0.1"), 10u);
          taken.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(taken.load(), 4000);
  EXPECT_EQ(budget.OpenApprox(), 0u);
  EXPECT_EQ(budget.OpenFrom("10.0.0.1"), 0u);
}

}  // namespace
}  // namespace tollgate::http
