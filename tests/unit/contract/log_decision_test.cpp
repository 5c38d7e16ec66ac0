#include <tollgate/contract/log_decision.hpp>

#include <set>
#include <string>

#include <gtest/gtest.h>

namespace tollgate::contract {
namespace {

TEST(LogDecision, EveryDecisionHasOneNameThatReadsBackAsIt) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < kLogDecisionNames.size(); ++i) {
    const auto d = static_cast<LogDecision>(i);
    EXPECT_TRUE(names.insert(NameOf(d)).second) << NameOf(d);
    EXPECT_EQ(ParseLogDecision(NameOf(d)), d) << NameOf(d);
  }
  EXPECT_EQ(NameOf(LogDecision::kStatus), "status");  // the last, by the table's size
  for (const char* unknown : {"", "Allowed", "reject", "allowed ", "shadow"}) {
    EXPECT_EQ(ParseLogDecision(unknown), std::nullopt) << unknown;
  }
}

TEST(LogDecision, RejectionsAreTheLimitsRefusals) {
  EXPECT_TRUE(IsRejection(LogDecision::kRejected));
  EXPECT_TRUE(IsRejection(LogDecision::kLocalRejected));
  for (LogDecision d : {LogDecision::kShadowRejected, LogDecision::kAllowed,
                        LogDecision::kUnavailable, LogDecision::kBlocked}) {
    EXPECT_FALSE(IsRejection(d)) << NameOf(d);
  }
}

}  // namespace
}  // namespace tollgate::contract
