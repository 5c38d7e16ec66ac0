#include "upstream_head.hpp"

#include <charconv>
#include <cstring>

#include <tollgate/util/ascii.hpp>

#include "fields.hpp"

namespace tollgate::http {

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
  if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || (line[7] != '0' && line[7] != '1') ||
      line[8] != ' ' || !digit(9) || !digit(10) || !digit(11) ||
      (line.size() > 12 && line[12] != ' ')) {
    return false;
  }
  h.size = head.size();
  h.status =
      static_cast<unsigned>((line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0'));
  if (h.status < 200) return false;  // interim responses: the parser skips them
  h.reason = line.size() > 13 ? line.substr(13) : std::string_view();
  h.keep_alive = line[7] == '1';
  h.line_count = 0;
  h.content_length.reset();
  bool simple = true;
  const std::string_view fields = head.substr(line.size() + 2, head.size() - 2 - (line.size() + 2));
  const bool parsed = ForEachField(
      fields, [&](std::string_view name, std::string_view value, std::string_view text) {
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
            if (util::EqualsIgnoreCase(value, "close")) {
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
