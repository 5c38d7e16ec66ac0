#include "upstream_head.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <utility>

#include <tollgate/util/ascii.hpp>

#include "fields.hpp"

namespace tollgate::http {
namespace {

using util::IsToken;

// RFC 9110 5.5 field-vchar, SP and HTAB (obs-text allowed, as Beast's parser allows it); the
// reason phrase has the same alphabet (RFC 9112 4). A lone CR, a NUL or another control byte
// relayed to a client could be read there as the end of a line.
bool IsFieldText(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c == '\t' || (c >= 0x20 && c != 0x7f);
  });
}

}  // namespace

// Where the head at the start of `data` ends (just after its blank line), or npos if `data`
// does not hold all of it yet. One memchr per line.
size_t HeadEnd(std::string_view data) {
  const char* const begin = data.data();
  const char* const end = begin + data.size();
  for (const char* p = begin; p < end; ++p) {
    p = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    if (!p) break;
    if (end - p >= 3 && p > begin && p[-1] == '\r' && p[1] == '\r' && p[2] == '\n') {
      return static_cast<size_t>(p + 3 - begin);
    }
  }
  return std::string_view::npos;
}

// `head`: a whole head through its blank line, as ReadHead() found it. `h` is filled afresh
// (it is reused from one response to the next).
bool ParseSimpleHead(std::string_view head, bool is_head, SimpleHead& h) {
  const std::string_view line = head.substr(0, head.find("\r\n"));
  auto digit = [&line](size_t i) { return line[i] >= '0' && line[i] <= '9'; };
  // The SP after the status code is not optional (RFC 9112 4; Beast's parser refuses
  // "HTTP/1.1 200" without it), even when the reason phrase is empty: the fuzzer found that
  // this path relayed what Beast refuses (tests/unit/http/upstream_head_test.cpp).
  if (line.size() < 13 || line.substr(0, 7) != "HTTP/1." || (line[7] != '0' && line[7] != '1') ||
      line[8] != ' ' || !digit(9) || !digit(10) || !digit(11) || line[12] != ' ') {
    return false;
  }
  h.size = head.size();
  h.status =
      static_cast<unsigned>((line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0'));
  if (h.status < 200) return false;  // interim responses: the parser skips them
  h.reason = line.size() > 13 ? line.substr(13) : std::string_view();
  // What Beast's parser refuses is never relayed from here (tests/fuzz/upstream_head_fuzz.cpp
  // found a field name with '=' in it relayed as it came; upstream_head_test.cpp).
  if (!IsFieldText(h.reason)) return false;
  h.keep_alive = line[7] == '1';
  h.line_count = 0;
  h.content_length.reset();
  bool simple = true;
  bool connection_seen = false;
  const std::string_view fields = head.substr(line.size() + 2, head.size() - 2 - (line.size() + 2));
  const bool parsed = ForEachField(
      fields, [&](std::string_view name, std::string_view value, std::string_view text) {
        if (!IsToken(name) || !IsFieldText(value)) {
          simple = false;
          return;
        }
        switch (Classify(name)) {
          case FieldKind::kEndToEnd:
            if (h.line_count == h.lines.size()) {
              simple = false;
            } else {
              h.lines[h.line_count++] = {text, name.size()};
            }
            break;
          case FieldKind::kTransferEncoding:
            simple = false;
            break;
          case FieldKind::kContentLength: {
            uint64_t n = 0;
            const auto r = std::from_chars(value.data(), value.data() + value.size(), n);
            if (r.ec != std::errc() || r.ptr != value.data() + value.size() || value.empty() ||
                (h.content_length && *h.content_length != n)) {
              simple = false;
            }
            h.content_length = n;
            break;
          }
          case FieldKind::kConnection:
            // A second Connection line: Beast's parser reads the first one only, so which
            // wins is left to it ("close" then "keep-alive" was keep-alive here and close
            // there; tests/unit/http/upstream_head_test.cpp).
            if (std::exchange(connection_seen, true)) {
              simple = false;
            } else if (util::EqualsIgnoreCase(value, "close")) {
              h.keep_alive = false;
            } else if (util::EqualsIgnoreCase(value, "keep-alive")) {
              h.keep_alive = true;
            } else {
              simple = false;  // names hop-by-hop fields
            }
            break;
          case FieldKind::kOtherHopByHop:
            break;
        }
      });
  const bool no_body = is_head || h.status == 204 || h.status == 304;
  if (!parsed || !simple || (!h.content_length && !no_body)) return false;
  if (no_body && !is_head) h.content_length.reset();
  return true;
}

}  // namespace tollgate::http
