#include <tollgate/util/name_table.hpp>

#include <cstdint>

#include <gtest/gtest.h>

namespace tollgate::util {
namespace {

enum class Colour : uint8_t { kRed, kGreen, kBlue };
constexpr NameTable<Colour, 3> kColours = {
    {{Colour::kRed, "red"}, {Colour::kGreen, "green"}, {Colour::kBlue, "blue"}}};

TEST(NameTable, LooksUpBothWays) {
  static_assert(ValueOf(kColours, "green") == Colour::kGreen);  // constexpr
  static_assert(NameOf(kColours, Colour::kBlue) == "blue");
  for (const Named<Colour>& entry : kColours) {
    EXPECT_EQ(ValueOf(kColours, entry.name), entry.value) << entry.name;
    EXPECT_EQ(NameOf(kColours, entry.value), entry.name);
  }
}

TEST(NameTable, RefusesNamesNotInTheTableExactly) {
  for (const char* name : {"", "Red", "RED", "red ", " red", "gree", "greens", "r"}) {
    EXPECT_EQ(ValueOf(kColours, name), std::nullopt) << "'" << name << "'";
  }
  EXPECT_EQ(NameOf(kColours, static_cast<Colour>(7)), "");
}

TEST(NameTable, NamesForAnErrorMessage) {
  EXPECT_EQ(NamesOf(kColours), "red, green or blue");
  EXPECT_EQ(NamesOf(NameTable<Colour, 2>{{{Colour::kRed, "red"}, {Colour::kBlue, "blue"}}}),
            "red or blue");
  EXPECT_EQ(NamesOf(NameTable<Colour, 1>{{{Colour::kRed, "red"}}}), "red");
}

TEST(NameTable, DenseWhenEveryValueIsNamedOnceInOrder) {
  static_assert(IsDense(kColours));
  static_assert(!IsDense(NameTable<Colour, 2>{{{Colour::kGreen, "green"}, {Colour::kRed, "red"}}}));
  static_assert(!IsDense(NameTable<Colour, 2>{{{Colour::kRed, "red"}, {Colour::kBlue, "blue"}}}));
  static_assert(!IsDense(NameTable<Colour, 2>{{{Colour::kRed, "red"}, {Colour::kGreen, "red"}}}));
  static_assert(!IsDense(NameTable<Colour, 2>{{{Colour::kRed, "red"}, {Colour::kGreen, ""}}}));
  EXPECT_TRUE(IsDense(kColours));
}

}  // namespace
}  // namespace tollgate::util
