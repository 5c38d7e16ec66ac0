// libFuzzer target: HeadEnd and ParseSimpleHead (src/http/upstream_head.cpp) on arbitrary bytes,
// against Beast's response parser, which the gateway uses for every upstream head the in-place
// parser leaves alone. The first byte says whether the request was a HEAD (its low bit); the
// rest is what the upstream sent. Whatever the in-place parser accepts, Beast's must accept as
// the same response: status, reason, version, keep-alive, framing and the end-to-end fields
// the relay copies (see tests/fuzz/run.sh).
#include "http/upstream_head.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <boost/beast/http.hpp>

#include "http/fields.hpp"

namespace {

namespace bhttp = boost::beast::http;

// Names the broken expectation before aborting, so a crash file says what differed.
#define CHECK(ok)                                            \
  do {                                                       \
    if (!(ok)) {                                             \
      std::fprintf(stderr, "upstream_head_fuzz: %s\n", #ok); \
      std::abort();                                          \
    }                                                        \
  } while (false)

using Fields = std::vector<std::pair<std::string, std::string>>;

// Fields by lower-case name, in order within a name (Beast groups repeated names).
Fields ByName(Fields v) {
  for (auto& f : v) {
    for (char& c : f.first) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  std::stable_sort(v.begin(), v.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool is_head = (data[0] & 1) != 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t end = tollgate::http::HeadEnd(input);
  if (end == std::string_view::npos) return 0;
  CHECK(end <= input.size() && input.substr(0, end).ends_with("\r\n\r\n"));
  tollgate::http::SimpleHead h;
  if (!tollgate::http::ParseSimpleHead(input.substr(0, end), is_head, h)) return 0;
  CHECK(h.size == end);

  bhttp::response_parser<bhttp::empty_body> p;
  p.header_limit(65536);
  p.body_limit(boost::none);  // as the gateway reads an upstream answer (forward.cpp)
  p.skip(is_head);
  boost::beast::error_code ec;
  const size_t used = p.put(boost::asio::buffer(input.data(), end), ec);
  CHECK(!ec);
  CHECK(p.is_header_done() && used == end);
  const auto& m = p.get();
  CHECK(m.result_int() == h.status);
  // Beast's reason() stands in the status's usual phrase for an empty one.
  CHECK(m.reason() ==
        (h.reason.empty() ? std::string_view(bhttp::obsolete_reason(m.result())) : h.reason));
  CHECK(m.version() == (input[7] == '1' ? 11 : 10));
  CHECK(m.keep_alive() == h.keep_alive);
  CHECK(!p.chunked());
  const bool no_body = is_head || h.status == 204 || h.status == 304;
  if (no_body) {
    CHECK(p.is_done() && (is_head || !h.content_length));
  } else {
    CHECK(h.content_length.has_value() && p.content_length() == h.content_length);
  }
  // The relay copies h.lines as they are: they must be Beast's end-to-end fields, in order
  // within a name.
  Fields beast, fast;
  for (const auto& f : m) {
    if (tollgate::http::Classify(f.name_string()) == tollgate::http::FieldKind::kEndToEnd) {
      beast.emplace_back(f.name_string(), f.value());
    }
  }
  for (size_t i = 0; i < h.line_count; ++i) {
    const std::string_view text = h.lines[i].text;
    const size_t n = h.lines[i].name_size;
    CHECK(n < text.size() && text[n] == ':');
    fast.emplace_back(text.substr(0, n), tollgate::util::Trim(text.substr(n + 1)));
  }
  CHECK(ByName(beast) == ByName(fast));
  return 0;
}
