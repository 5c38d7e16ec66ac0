#include <tollgate/util/json_escape.hpp>

#include <cstdio>

namespace tollgate::util {

void AppendJsonEscaped(std::string& out, std::string_view s) {
  out.reserve(out.size() + s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      // Client bytes (paths, headers) may be any bytes: pass well-formed UTF-8 through and
      // replace anything else with U+FFFD, so every log line stays valid JSON.
      // 0xf5-0xff start no sequence (they were read as 3-byte leads, and passed through).
      const size_t len = c >= 0xf5                ? 0
                         : c >= 0xf0              ? 4
                         : c >= 0xe0              ? 3
                         : c >= 0xc2 && c <= 0xdf ? 2
                                                  : 0;
      bool ok = len > 0 && i + len <= s.size();
      for (size_t k = 1; ok && k < len; ++k) {
        ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
      }
      if (ok && len == 3) {
        const auto c1 = static_cast<unsigned char>(s[i + 1]);
        ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);  // overlong, surrogates
      }
      if (ok && len == 4) {
        const auto c1 = static_cast<unsigned char>(s[i + 1]);
        ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
      }
      if (ok) {
        out.append(s.substr(i, len));
        i += len - 1;
      } else {
        out += "\\ufffd";
      }
    }
  }
}

std::string JsonEscape(std::string_view s) {
  std::string out;
  AppendJsonEscaped(out, s);
  return out;
}

}  // namespace tollgate::util
