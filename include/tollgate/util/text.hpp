// Appending numbers to text without a temporary string or the locale machinery.
#pragma once

#include <charconv>
#include <concepts>
#include <string>

namespace tollgate::util {

// Appends `v` in decimal.
template <std::integral T>
void AppendDecimal(std::string& out, T v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace tollgate::util
