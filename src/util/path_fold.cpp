#include <tollgate/util/path_fold.hpp>

#include <array>
#include <cstdint>

namespace tollgate::util {
namespace {

using Byte = unsigned char;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte of the %XX at `s` (s[0] == '%'), or -1 when it is not one.
int EscapedByte(std::string_view s) {
  if (s.size() < 3 || s[0] != '%') return -1;
  const int hi = HexValue(s[1]);
  const int lo = HexValue(s[2]);
  return hi < 0 || lo < 0 ? -1 : (hi << 4) | lo;
}

// The ASCII character that the UTF-8 sequence encoded at the start of `s` ("%EF%BC%AC") folds
// to, with the number of bytes of `s` it takes; 0 when it folds to none.
char FoldedUnicode(std::string_view s, size_t& taken) {
  std::array<int, 3> b{-1, -1, -1};
  for (size_t i = 0; i < 3 && 3 * i < s.size(); ++i) b[i] = EscapedByte(s.substr(3 * i));
  if (b[0] == 0xEF && b[1] == 0xBC && b[2] >= 0x81 && b[2] <= 0xBF) {
    taken = 9;  // U+FF01-U+FF3F: '!' to '_'
    return static_cast<char>(0x21 + (b[2] - 0x81));
  }
  if (b[0] == 0xEF && b[1] == 0xBD && b[2] >= 0x80 && b[2] <= 0x9E) {
    taken = 9;  // U+FF40-U+FF5E: '`' to '~'
    return static_cast<char>(0x60 + (b[2] - 0x80));
  }
  if (b[0] == 0xE2 && b[1] == 0x84 && b[2] == 0xAA) {
    taken = 9;  // U+212A KELVIN SIGN
    return 'k';
  }
  if (b[0] == 0xC5 && b[1] == 0xBF) {
    taken = 6;  // U+017F LATIN SMALL LETTER LONG S
    return 's';
  }
  if (b[0] == 0xC4 && (b[1] == 0xB1 || b[1] == 0xB0)) {
    taken = 6;  // U+0131 LATIN SMALL LETTER DOTLESS I, U+0130 CAPITAL I WITH DOT ABOVE
    return 'i';
  }
  return 0;
}

bool DecodesInFold(int v);

// FoldedUnicode without the characters that would read as syntax once folded (issue 31: the
// fold of a fold is the fold).
char FoldedLetter(std::string_view s, size_t& taken) {
  const char c = FoldedUnicode(s, taken);
  return c != 0 && DecodesInFold(static_cast<unsigned char>(c)) ? c : 0;
}

bool DecodesInFold(int v) {
  return v > 0x20 && v < 0x7f && v != '/' && v != '\\' && v != '%' && v != ';' && v != '?' &&
         v != '#';
}

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// Appends the folded form of one segment (no '/') to `out`.
void FoldSegment(std::string_view segment, std::string& out) {
  const size_t begin = out.size();
  segment = segment.substr(0, segment.find(';'));
  for (size_t i = 0; i < segment.size();) {
    const char c = segment[i];
    if (c != '%') {
      out.push_back(Lower(c));
      ++i;
      continue;
    }
    size_t taken = 0;
    if (const char folded = FoldedLetter(segment.substr(i), taken)) {
      out.push_back(Lower(folded));
      i += taken;
      continue;
    }
    const int v = EscapedByte(segment.substr(i));
    if (v == 0x20 || DecodesInFold(v)) {
      out.push_back(Lower(static_cast<char>(v)));
      i += 3;
    } else if (v >= 0) {
      out.append(segment.substr(i, 3));  // kept as it is, hex and all
      i += 3;
    } else {
      out.push_back(c);
      ++i;
    }
  }
  while (out.size() > begin && (out.back() == '.' || out.back() == ' ')) out.pop_back();
}

}  // namespace

bool PathNeedsFold(std::string_view path) {
  for (size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if ((c >= 'A' && c <= 'Z') || c == '%' || c == ';') return true;
    if (c == '.' && (i + 1 == path.size() || path[i + 1] == '/')) return true;
  }
  return false;
}

void FoldPath(std::string_view path, std::string& out) {
  out.clear();
  if (path.empty() || path[0] != '/') {
    out.assign(path);
    return;
  }
  size_t pos = 1;
  for (;;) {
    const size_t slash = path.find('/', pos);
    const std::string_view segment =
        path.substr(pos, slash == std::string_view::npos ? std::string_view::npos : slash - pos);
    const size_t before = out.size();
    out.push_back('/');
    FoldSegment(segment, out);
    // A segment that folds to nothing is dropped, unless it is the trailing slash itself.
    if (out.size() == before + 1 && !segment.empty()) out.resize(before);
    if (slash == std::string_view::npos) break;
    pos = slash + 1;
  }
  if (out.empty()) out.push_back('/');
}

bool IsFormatSuffix(std::string_view rest) {
  return rest.size() >= 2 && rest[0] == '.' &&
         rest.find_first_of("/.?", 1) == std::string_view::npos;
}

}  // namespace tollgate::util
