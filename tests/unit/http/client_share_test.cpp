#include "http/client_share.hpp"

#include <gtest/gtest.h>

namespace tollgate::http {
namespace {

TEST(ClientShares, AnEmptyClaimCountsAndRefusesNothing) {
  ClientShares::Claim claim;
  EXPECT_TRUE(claim.MayHold(1));
  claim.Hold();
  claim.Queue();
  EXPECT_TRUE(claim.MayHold(1));
  EXPECT_TRUE(claim.MayQueue(1));
}

TEST(ClientShares, OneAddressIsHeldToItsShare) {
  ClientShares shares;
  ClientShares::Claim a, b, other;
  shares.Begin(a, "10.0.0.1", "");
  shares.Begin(b, "10.0.0.1", "");
  shares.Begin(other, "10.0.0.2", "");
  a.Hold();
  EXPECT_FALSE(b.MayHold(1));
  EXPECT_TRUE(b.MayHold(2));
  EXPECT_TRUE(other.MayHold(1));
  a.Unhold();
  EXPECT_TRUE(b.MayHold(1));
}

TEST(ClientShares, AKeyIsOneClientFromEveryAddress) {
  ClientShares shares;
  ClientShares::Claim a, b;
  shares.Begin(a, "10.0.0.1", "k1");
  shares.Begin(b, "10.0.0.2", "k1");
  a.Hold();
  EXPECT_FALSE(b.MayHold(1));
  // An address and a key of the same name are different clients.
  ClientShares::Claim c;
  shares.Begin(c, "k1", "");
  EXPECT_TRUE(c.MayHold(1));
}

TEST(ClientShares, HoldAndQueueCountOncePerClaim) {
  ClientShares shares;
  ClientShares::Claim a, b;
  shares.Begin(a, "10.0.0.1", "");
  shares.Begin(b, "10.0.0.1", "");
  a.Hold();
  a.Hold();
  EXPECT_TRUE(b.MayHold(2));
  a.Queue();
  a.Queue();
  EXPECT_FALSE(b.MayQueue(1));
  EXPECT_TRUE(b.MayQueue(2));
  a.Unqueue();
  a.Unqueue();
  EXPECT_TRUE(b.MayQueue(1));
}

TEST(ClientShares, EntriesAreDroppedWithTheirLastClaim) {
  ClientShares shares;
  {
    ClientShares::Claim a;
    shares.Begin(a, "10.0.0.1", "k1");
    {
      ClientShares::Claim b;
      shares.Begin(b, "10.0.0.1", "");
      b.Hold();
      EXPECT_EQ(shares.size(), 2u);
    }
    EXPECT_EQ(shares.size(), 2u);  // a still counts there
    a.Hold();
    EXPECT_FALSE(a.MayHold(1));
  }
  EXPECT_EQ(shares.size(), 0u);
}

TEST(ClientShares, BeginAgainGivesBackWhatTheClaimHeld) {
  ClientShares shares;
  ClientShares::Claim a, b;
  shares.Begin(a, "10.0.0.1", "");
  shares.Begin(b, "10.0.0.1", "");
  a.Hold();
  shares.Begin(a, "10.0.0.9", "");
  EXPECT_TRUE(b.MayHold(1));
}

}  // namespace
}  // namespace tollgate::http
