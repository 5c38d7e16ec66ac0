// ASCII helpers for protocol text: header names, tokens, comma-separated lists. Pure.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace tollgate::util {

// RFC 9110 5.6.2 tchar: the bytes of a token (a method, a field name, a list element).
inline constexpr std::array<bool, 256> kTokenChars = [] {
  std::array<bool, 256> t{};
  for (unsigned char c : std::string_view("!#$%&'*+-.^_`|~")) t[c] = true;
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = t[c - 'a' + 'A'] = true;
  return t;
}();

// Whether `s` is a token (RFC 9110 5.6.2): one or more tchar.
inline bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (!kTokenChars[static_cast<unsigned char>(c)]) return false;
  }
  return true;
}

// Whether `s` is a protocol of Upgrade (RFC 9110 7.8): a token, or token/token.
inline bool IsProtocolToken(std::string_view s) {
  const size_t slash = s.find('/');
  if (slash == std::string_view::npos) return IsToken(s);
  return IsToken(s.substr(0, slash)) && IsToken(s.substr(slash + 1));
}

// Trims spaces and tabs (HTTP's optional whitespace) from both ends.
inline std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// An ASCII upper-case letter as lower case; any other byte as it is.
inline char ToLower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }
// `s` with its ASCII upper-case letters in lower case (host names, certificate names).
inline std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ToLower(c);
  return out;
}

// ASCII only (header names, tokens); inline, since header names are compared by the dozen
// on every proxied request and most differ in length.
inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    // Bytes that differ are equal only as the two cases of one ASCII letter. (Most bytes
    // compared are equal: names are usually written in their canonical case.)
    const unsigned char x = static_cast<unsigned char>(a[i]) | 0x20;
    if (a[i] != b[i] &&
        (x != (static_cast<unsigned char>(b[i]) | 0x20) || static_cast<unsigned>(x - 'a') > 25u)) {
      return false;
    }
  }
  return true;
}

// Whether `pred` holds for an element of a comma-separated list (each trimmed, empty ones
// included); stops at the first that does.
template <class Pred>
inline bool AnyListElement(std::string_view list, Pred pred) {
  for (;;) {
    const size_t comma = list.find(',');
    if (pred(Trim(list.substr(0, comma)))) return true;
    if (comma == std::string_view::npos) return false;
    list.remove_prefix(comma + 1);
  }
}

}  // namespace tollgate::util
