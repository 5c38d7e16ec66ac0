// One name table per enum: the names a config file, a log line or a JSON answer spells a value
// with, and the lookups both ways, so no room compares the names as strings (issue 32, part 5).
//
//   enum class StoreType : uint8_t { kMemory, kRedis };
//   inline constexpr util::NameTable<StoreType, 2> kStoreTypeNames = {{
//       {StoreType::kMemory, "memory"}, {StoreType::kRedis, "redis"}}};
//   static_assert(util::IsDense(kStoreTypeNames));
//
// Header-only and constexpr; the tables are a handful of entries, so the lookups are linear.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tollgate::util {

template <typename E>
struct Named {
  E value;
  std::string_view name;
};

// The entries of one enum, in the order its names are listed (in error messages too).
template <typename E, size_t N>
using NameTable = std::array<Named<E>, N>;

// Whether the table names every value 0..N-1 of the enum once, in that order: then NameOf is
// total. For a static_assert beside the table.
template <typename E, size_t N>
constexpr bool IsDense(const NameTable<E, N>& table) {
  for (size_t i = 0; i < N; ++i) {
    if (static_cast<size_t>(table[i].value) != i || table[i].name.empty()) return false;
    for (size_t j = 0; j < i; ++j) {
      if (table[j].name == table[i].name) return false;
    }
  }
  return true;
}

// The value `name` stands for (exact, case-sensitive); nullopt for a name not in the table.
template <typename E, size_t N>
constexpr std::optional<E> ValueOf(const NameTable<E, N>& table, std::string_view name) {
  for (const Named<E>& entry : table) {
    if (entry.name == name) return entry.value;
  }
  return std::nullopt;
}

// The name of `value`; empty for a value the table does not list.
template <typename E, size_t N>
constexpr std::string_view NameOf(const NameTable<E, N>& table, E value) {
  for (const Named<E>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return {};
}

// The names for an error message: "memory or redis", "a, b or c".
template <typename E, size_t N>
std::string NamesOf(const NameTable<E, N>& table) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i) out += i + 1 == N ? " or " : ", ";
    out += table[i].name;
  }
  return out;
}

}  // namespace tollgate::util
