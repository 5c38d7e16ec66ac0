#include <tollgate/core/limit.hpp>

#include <gtest/gtest.h>

namespace tollgate::core {
namespace {

TEST(Limit, ParsesAlgorithmNames) {
  EXPECT_EQ(ParseAlgorithm("token_bucket").value(), Algorithm::kTokenBucket);
  EXPECT_EQ(ParseAlgorithm("sliding_window_log").value(), Algorithm::kSlidingWindowLog);
  EXPECT_EQ(ParseAlgorithm("quota").value(), Algorithm::kQuota);
  const auto bad = ParseAlgorithm("leaky");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("algorithm: unknown 'leaky'"), std::string::npos);
  for (auto a : {Algorithm::kTokenBucket, Algorithm::kSlidingWindowLog,
                 Algorithm::kSlidingWindowCounter, Algorithm::kFixedWindow, Algorithm::kQuota}) {
    EXPECT_EQ(ParseAlgorithm(AlgorithmName(a)).value(), a);
  }
}

TEST(Limit, CreateValidatesEveryAlgorithm) {
  EXPECT_EQ(Limit::Create({.algorithm = Algorithm::kTokenBucket, .capacity = 0, .refill = {1, 1}})
                .error(),
            "capacity: must be > 0");
  EXPECT_EQ(Limit::Create({.algorithm = Algorithm::kFixedWindow, .limit = 5}).error(),
            "window_seconds: must be > 0");
  EXPECT_FALSE(Limit::Create({.algorithm = Algorithm::kSlidingWindowLog, .limit = -1}).ok());
  EXPECT_FALSE(Limit::Create({.algorithm = Algorithm::kQuota, .allowance = -3}).ok());
}

TEST(Limit, PolicyParametersForHeaders) {
  const Instant t = Instant::FromUnixSeconds(DaysFromCivil({2026, 2, 3}) * 86'400);
  const Limit burst = Limit::Create({.algorithm = Algorithm::kTokenBucket,
                                     .capacity = 20,
                                     .refill = Rate::Parse("0.5", 1).value()})
                          .value();
  EXPECT_EQ(burst.PolicyQuota(), 20);
  EXPECT_EQ(burst.PolicyWindowSeconds(t), 40);
  const Limit daily =
      Limit::Create({.algorithm = Algorithm::kQuota, .allowance = 1000, .ceiling = 10000}).value();
  EXPECT_EQ(daily.PolicyQuota(), 1000);
  EXPECT_EQ(daily.PolicyWindowSeconds(t), 86'400);
  const Limit monthly =
      Limit::Create({.algorithm = Algorithm::kQuota, .period = Period::kMonth, .ceiling = 5})
          .value();
  EXPECT_EQ(monthly.PolicyWindowSeconds(t), 28 * 86'400);
  const Limit window = Limit::Create({.algorithm = Algorithm::kSlidingWindowLog,
                                      .limit = 700,
                                      .window = Duration::Seconds(60)})
                           .value();
  EXPECT_EQ(window.PolicyQuota(), 700);
  EXPECT_EQ(window.PolicyWindowSeconds(t), 60);
  EXPECT_TRUE(window.UsesLog());
}

TEST(Limit, ZeroCostReadsWithoutChanging) {
  const Limit burst = Limit::Create({.algorithm = Algorithm::kTokenBucket,
                                     .capacity = 3,
                                     .refill = Rate::Parse("1", 1).value()})
                          .value();
  State s;
  const Instant t = Instant::FromUnixSeconds(1'790'000'000);
  ASSERT_TRUE(burst.Evaluate(s, 2, t).allowed);
  State copy = s;
  const Decision d = burst.Evaluate(copy, 0, t);
  EXPECT_EQ(d.remaining, 1);
}

}  // namespace
}  // namespace tollgate::core
