#include <tollgate/policy/policy_holder.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tollgate::policy {
namespace {

config::Config ConfigOf(const std::string& keys_yaml) {
  auto c = config::ParseConfig(
      "plans:\n  free: {limits: [{name: b, capacity: 5, refill_per_second: 1}]}\n"
      "keys:\n" +
      keys_yaml);
  EXPECT_TRUE(c.ok()) << c.error();
  return c.ok() ? *std::move(c) : config::Config{};
}

TEST(PolicyHolder, HoldsNothingBeforeTheFirstInstall) {
  const PolicyHolder holder;
  EXPECT_EQ(holder.Current(), nullptr);
  EXPECT_EQ(holder.generation().load(), 0u);
}

TEST(PolicyHolder, AnInstallSwapsThePolicyInAndMovesTheGenerationOn) {
  PolicyHolder holder;
  ASSERT_TRUE(holder.Install(ConfigOf("  - {key: k-1, id: one, plan: free}\n")).ok());
  const auto first = holder.Current();
  ASSERT_NE(first, nullptr);
  EXPECT_NE(first->FindById("one"), nullptr);
  EXPECT_EQ(holder.generation().load(), 1u);

  ASSERT_TRUE(holder.Install(ConfigOf("  - {key: k-2, id: two, plan: free}\n")).ok());
  EXPECT_EQ(holder.generation().load(), 2u);
  EXPECT_EQ(holder.Current()->FindById("one"), nullptr);
  EXPECT_NE(holder.Current()->FindById("two"), nullptr);
  // A reader keeps the policy it took.
  EXPECT_NE(first->FindById("one"), nullptr);
}

TEST(PolicyHolder, ARefusedConfigurationChangesNothing) {
  PolicyHolder holder;
  ASSERT_TRUE(holder.Install(ConfigOf("  - {key: k-1, id: one, plan: gold}\n")).ok());
  const auto before = holder.Current();
  config::Config bad = ConfigOf("  - {key: k-1, id: one, plan: free}\n");
  bad.identity.trusted_proxies = {"not-an-address"};  // refused by the build
  const auto installed = holder.Install(std::move(bad));
  ASSERT_FALSE(installed.ok());
  EXPECT_FALSE(installed.error().empty());
  EXPECT_EQ(holder.Current(), before);
  EXPECT_EQ(holder.generation().load(), 1u);
  EXPECT_EQ(holder.unknown_plan_keys().load(), 1u);
}

TEST(PolicyHolder, KeysOfUnknownPlansAreCountedAndToldWhenTheirNumberChanges) {
  PolicyHolder holder;
  std::vector<std::string> told;
  const PolicyHolder::UnknownPlansFn note = [&](size_t keys, const config::KeyConfig& first) {
    told.push_back(std::to_string(keys) + " " + first.id + " " + first.plan);
  };
  const std::string two_unknown =
      "  - {key: k-1, id: one, plan: gold}\n  - {key: k-2, id: two, plan: silver}\n"
      "  - {key: k-3, id: three, plan: free}\n";
  ASSERT_TRUE(holder.Install(ConfigOf(two_unknown), note).ok());
  EXPECT_EQ(holder.unknown_plan_keys().load(), 2u);
  ASSERT_TRUE(holder.Install(ConfigOf(two_unknown), note).ok());  // the same number: not again
  ASSERT_TRUE(holder.Install(ConfigOf("  - {key: k-3, id: three, plan: free}\n"), note).ok());
  EXPECT_EQ(holder.unknown_plan_keys().load(), 0u);
  EXPECT_EQ(told, std::vector<std::string>{"2 one gold"});
}

}  // namespace
}  // namespace tollgate::policy
