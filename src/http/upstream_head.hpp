// An upstream response head of the common shape, read in place: a pure parser, unit-tested
// and fuzzed beside the request head's (request_head.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include <tollgate/util/ascii.hpp>

namespace tollgate::http {

// An upstream response head of the common shape, read in place from the connection's buffer:
// a final status, a Content-Length (or no body), no transfer coding, no folded lines, no
// fields named in Connection. Such a response is relayed without Beast's parser; anything
// else is left to it (ParseSimpleHead returns false).
struct SimpleHead {
  unsigned status = 0;
  std::string_view reason;
  // The end-to-end field lines (not hop-by-hop or framing), without their CRLF, and the length
  // of each one's name: the relay writes them without parsing the head again.
  struct Line {
    std::string_view text;
    size_t name_size;
  };
  static constexpr size_t kMaxLines = 48;  // more: left to Beast's parser
  std::array<Line, kMaxLines> lines;
  size_t line_count = 0;
  std::optional<uint64_t> content_length;
  bool keep_alive = true;
  size_t size = 0;  // of the head, through its blank line
};

// Calls fn(name, value, line) for each "name: value" line of `fields`; false if one is not of
// that shape.
template <class Fn>
bool ForEachField(std::string_view fields, Fn fn) {
  const char* p = fields.data();
  const char* const end = p + fields.size();
  while (p < end) {
    const auto* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    if (!nl || nl == p || nl[-1] != '\r') return false;  // a bare LF: left to Beast's parser
    const std::string_view line(p, static_cast<size_t>(nl - 1 - p));
    p = nl + 1;
    const size_t colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos || line[0] == ' ' || line[0] == '\t' ||
        line[colon - 1] == ' ' || line[colon - 1] == '\t') {
      return false;
    }
    fn(line.substr(0, colon), util::Trim(line.substr(colon + 1)), line);
  }
  return true;
}

// Where the head at the start of `data` ends (just after its blank line), or npos if `data`
// does not hold all of it yet. One memchr per line.
size_t HeadEnd(std::string_view data);

// `head`: a whole head through its blank line, as HeadEnd() found it. `h` is filled afresh (it
// is reused from one response to the next). False: a head of another shape, for Beast's parser.
bool ParseSimpleHead(std::string_view head, bool is_head, SimpleHead& h);

}  // namespace tollgate::http
