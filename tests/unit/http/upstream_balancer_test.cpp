#include "http/upstream_balancer.hpp"

#include <gtest/gtest.h>

#include <map>
#include <thread>
#include <vector>

namespace tollgate::http {
namespace {

using config::Balance;
using config::PassiveHealthConfig;

constexpr int64_t kT0 = 1'000'000;  // any monotonic time but 0
const PassiveHealthConfig kPassive{
    .consecutive_failures = 3, .base_ejection_ms = 1'000, .max_ejection_ms = 4'000};

TEST(Balancer, RoundRobinTakesEachEndpointInTurn) {
  Balancer b(Balance::kRoundRobin, kPassive, 3);
  std::map<size_t, int> got;
  for (int i = 0; i < 300; ++i) ++got[*b.Pick(kT0)];
  EXPECT_EQ(got, (std::map<size_t, int>{{0, 100}, {1, 100}, {2, 100}}));
}

TEST(Balancer, LeastOutstandingPrefersTheIdleEndpoint) {
  Balancer b(Balance::kLeastOutstanding, kPassive, 3);
  Balancer::Lease busy0(b, 0), busy1(b, 0), busy2(b, 1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(b.Pick(kT0), 2u);
  Balancer::Lease busy3(b, 2), busy4(b, 2);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(b.Pick(kT0), 1u);  // 2, 1, 2 outstanding
}

TEST(Balancer, LeastOutstandingSharesTiesInTurn) {
  Balancer b(Balance::kLeastOutstanding, kPassive, 2);
  std::map<size_t, int> got;
  for (int i = 0; i < 100; ++i) ++got[*b.Pick(kT0)];
  EXPECT_EQ(got, (std::map<size_t, int>{{0, 50}, {1, 50}}));
}

TEST(Balancer, LeaseCountsOutstandingAndRequests) {
  Balancer b(Balance::kRoundRobin, kPassive, 1);
  {
    Balancer::Lease a(b, 0);
    Balancer::Lease moved = std::move(a);
    EXPECT_EQ(b.Read(0, kT0).outstanding, 1);
  }
  EXPECT_EQ(b.Read(0, kT0).outstanding, 0);
  EXPECT_EQ(b.Read(0, kT0).requests, 1u);
}

TEST(Balancer, ConsecutiveFailuresEjectAndASuccessResetsTheCount) {
  Balancer b(Balance::kRoundRobin, kPassive, 2);
  EXPECT_FALSE(b.Report(0, false, kT0));
  EXPECT_FALSE(b.Report(0, false, kT0));
  EXPECT_FALSE(b.Report(0, true, kT0));  // not in a row
  EXPECT_FALSE(b.Report(0, false, kT0));
  EXPECT_FALSE(b.Report(0, false, kT0));
  EXPECT_TRUE(b.Report(0, false, kT0));
  EXPECT_FALSE(b.Admitted(0, kT0));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(b.Pick(kT0), 1u);
  EXPECT_EQ(b.Read(0, kT0).ejections, 1u);
  EXPECT_EQ(b.Read(0, kT0).ejected_for_ms, 1'000);
  // Failures while out (requests that began before) add nothing.
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(b.Report(0, false, kT0 + 10));
  EXPECT_EQ(b.Read(0, kT0).ejected_for_ms, 1'000);
}

TEST(Balancer, AdmittedAgainAfterABackOffThatDoublesUpToTheMaximum) {
  Balancer b(Balance::kRoundRobin, kPassive, 1);
  int64_t now = kT0;
  for (const int64_t expected : {1'000, 2'000, 4'000, 4'000}) {
    for (int i = 0; i < 3; ++i) (void)b.Report(0, false, now);
    EXPECT_FALSE(b.Admitted(0, now));
    EXPECT_FALSE(b.Admitted(0, now + expected - 1));
    EXPECT_EQ(b.Pick(now + expected - 1), std::nullopt);
    EXPECT_EQ(b.MsUntilAdmission(now, 5'000), expected);
    now += expected;
    EXPECT_TRUE(b.Admitted(0, now)) << expected;
    EXPECT_EQ(b.Pick(now), 0u);
  }
  // Admitted for max_ejection_ms since it came back: the back-off starts over.
  now += 4'000;
  for (int i = 0; i < 3; ++i) (void)b.Report(0, false, now);
  EXPECT_EQ(b.Read(0, now).ejected_for_ms, 1'000);
  EXPECT_EQ(b.Read(0, now).ejections, 5u);
}

TEST(Balancer, PassiveHealthOffNeverEjects) {
  Balancer b(Balance::kRoundRobin, {.consecutive_failures = 0}, 1);
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(b.Report(0, false, kT0));
  EXPECT_EQ(b.Pick(kT0), 0u);
}

TEST(Balancer, EveryEndpointOutPicksNone) {
  Balancer b(Balance::kLeastOutstanding, kPassive, 2);
  for (size_t e : {0u, 1u})
    for (int i = 0; i < 3; ++i) (void)b.Report(e, false, kT0);
  EXPECT_EQ(b.Pick(kT0), std::nullopt);
  EXPECT_EQ(b.MsUntilAdmission(kT0 + 400, 5'000), 600);
}

TEST(Balancer, TriedEndpointsAreSkipped) {
  Balancer b(Balance::kRoundRobin, kPassive, 3);
  for (int i = 0; i < 10; ++i) {
    const auto first = b.Pick(kT0);
    const auto second = b.Pick(kT0, Balancer::Tried{1} << *first);
    ASSERT_TRUE(second);
    EXPECT_NE(*first, *second);
  }
  EXPECT_EQ(b.Pick(kT0, 0b111), std::nullopt);
}

TEST(Balancer, HealthChecksTakeOutAndBringBackAfterTheirThresholds) {
  Balancer b(Balance::kRoundRobin, kPassive, 2);
  EXPECT_FALSE(b.ReportCheck(0, false, 2, 3));
  EXPECT_TRUE(b.Admitted(0, kT0));
  EXPECT_TRUE(b.ReportCheck(0, false, 2, 3));
  EXPECT_FALSE(b.Admitted(0, kT0));
  EXPECT_FALSE(b.Read(0, kT0).check_healthy);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b.Pick(kT0), 1u);
  EXPECT_FALSE(b.ReportCheck(0, true, 2, 3));
  EXPECT_FALSE(b.ReportCheck(0, true, 2, 3));
  EXPECT_FALSE(b.ReportCheck(0, false, 2, 3));  // the streak starts over
  for (int i = 0; i < 3; ++i) (void)b.ReportCheck(0, true, 2, 3);
  EXPECT_TRUE(b.Admitted(0, kT0));
  EXPECT_EQ(b.Read(0, kT0).ejections, 1u);
  // Out by its checks only: the next check is the soonest it may come back.
  (void)b.ReportCheck(0, false, 1, 1);
  (void)b.ReportCheck(1, false, 1, 1);
  EXPECT_EQ(b.MsUntilAdmission(kT0, 5'000), 5'000);
}

TEST(Balancer, ThreadsReportingAtOnceEjectOnce) {
  Balancer b(Balance::kRoundRobin,
             {.consecutive_failures = 4, .base_ejection_ms = 60'000, .max_ejection_ms = 60'000}, 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&b] {
      for (int i = 0; i < 1'000; ++i) {
        Balancer::Lease lease(b, 0);
        (void)b.Report(0, false, kT0);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(b.Read(0, kT0).ejections, 1u);
  EXPECT_EQ(b.Read(0, kT0).outstanding, 0);
  EXPECT_EQ(b.Read(0, kT0).requests, 4'000u);
}

}  // namespace
}  // namespace tollgate::http
