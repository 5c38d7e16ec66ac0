#include <tollgate/core/rate.hpp>

#include <gtest/gtest.h>

namespace tollgate::core {
namespace {

TEST(Rate, ParsesDecimalsAsExactFractions) {
  EXPECT_EQ(Rate::Parse("0.5", 1).value(), (Rate{1, 2'000'000}));
  EXPECT_EQ(Rate::Parse("50", 1).value(), (Rate{1, 20'000}));
  EXPECT_EQ(Rate::Parse("3", 1).value(), (Rate{3, 1'000'000}));
  EXPECT_EQ(Rate::Parse("600", 60).value(), (Rate{1, 100'000}));  // 10/s, reduced
  EXPECT_EQ(Rate::Parse("1", 60).value(), (Rate{1, 60'000'000}));
  EXPECT_EQ(Rate::Parse("0.000001", 1).value(), (Rate{1, 1'000'000'000'000}));
}

TEST(Rate, RejectsBadInput) {
  EXPECT_FALSE(Rate::Parse("", 1).ok());
  EXPECT_FALSE(Rate::Parse("0", 1).ok());
  EXPECT_FALSE(Rate::Parse("-1", 1).ok());
  EXPECT_FALSE(Rate::Parse("1e3", 1).ok());
  EXPECT_FALSE(Rate::Parse("0.0000001", 1).ok());
  EXPECT_FALSE(Rate::Parse("1.2.3", 1).ok());
  EXPECT_FALSE(Rate::Parse("99999999999999999999", 1).ok());
  EXPECT_FALSE(Rate::Parse("1", 0).ok());
}

}  // namespace
}  // namespace tollgate::core
