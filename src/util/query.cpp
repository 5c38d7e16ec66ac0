#include <tollgate/util/query.hpp>

namespace tollgate::util {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string_view FormDecode(std::string_view in, std::string& scratch) {
  if (in.find_first_of("+%") == std::string_view::npos) return in;
  scratch.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '+') {
      scratch += ' ';
      continue;
    }
    const int hi = c == '%' && i + 2 < in.size() ? HexValue(in[i + 1]) : -1;
    const int lo = hi >= 0 ? HexValue(in[i + 2]) : -1;
    if (lo < 0) {
      scratch += c;  // not an escape, or a malformed one: kept as it is, as browsers do
      continue;
    }
    scratch += static_cast<char>((hi << 4) | lo);
    i += 2;
  }
  return scratch;
}

std::optional<std::string> QueryValue(std::string_view query, std::string_view name) {
  std::optional<std::string> found;
  ForEachQueryParam(query, [&](std::string_view n, std::string_view value, bool) {
    if (n != name) return true;
    found.emplace(value);
    return false;
  });
  return found;
}

}  // namespace tollgate::util
