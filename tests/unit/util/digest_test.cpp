#include <gtest/gtest.h>

#include <tollgate/util/digest.hpp>

namespace tollgate::util {
namespace {

// FIPS 180-2 test vectors.
TEST(Sha256, HexMatchesTheStandardVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, RawIsTheHexDigestsBytes) {
  const std::string raw = Sha256Raw("abc");
  ASSERT_EQ(raw.size(), 32u);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : raw) {
    hex += kHex[c >> 4];
    hex += kHex[c & 15];
  }
  EXPECT_EQ(hex, Sha256Hex("abc"));
}

}  // namespace
}  // namespace tollgate::util
