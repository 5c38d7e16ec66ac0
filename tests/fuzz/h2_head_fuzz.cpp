// libFuzzer target: RenderH1Request (src/http/h2_head.cpp) on arbitrary header blocks. The first
// byte's low bit says whether a body follows; the rest is fields, each a length byte and a name,
// then a length byte and a value. Whatever it accepts must be one HTTP/1.1 head and nothing
// more: a request line of three parts, lines ending in CRLF, no other CR, LF or NUL, and its
// blank line at the very end (no second request smuggled through a field).
#include "http/h2_head.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

#define CHECK(ok)                                      \
  do {                                                 \
    if (!(ok)) {                                       \
      std::fprintf(stderr, "h2_head_fuzz: %s\n", #ok); \
      std::abort();                                    \
    }                                                  \
  } while (0)

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool has_body = data[0] & 1;
  std::vector<tollgate::http::H2Field> fields;
  size_t i = 1;
  auto take = [&](std::string& out) {
    if (i >= size) return false;
    const size_t n = data[i++];
    if (i + n > size) return false;
    out.assign(reinterpret_cast<const char*>(data + i), n);
    i += n;
    return true;
  };
  for (;;) {
    tollgate::http::H2Field f;
    if (!take(f.name) || !take(f.value)) break;
    fields.push_back(std::move(f));
  }
  std::string out;
  tollgate::http::H2Request request;
  if (tollgate::http::RenderH1Request(fields, has_body, out, request) !=
      tollgate::http::H2HeadResult::kOk)
    return 0;
  const std::string_view head(out);
  CHECK(head.size() >= 4 && head.substr(head.size() - 4) == "\r\n\r\n");
  CHECK(head.find("\r\n\r\n") == head.size() - 4);
  for (size_t j = 0; j < head.size(); ++j) {
    CHECK(head[j] != '\0');
    if (head[j] == '\r') CHECK(j + 1 < head.size() && head[j + 1] == '\n');
    if (head[j] == '\n') CHECK(j > 0 && head[j - 1] == '\r');
  }
  const std::string_view line = head.substr(0, head.find("\r\n"));
  size_t spaces = 0;
  for (const char c : line) spaces += c == ' ';
  CHECK(spaces == 2);
  CHECK(line.ends_with(" HTTP/1.1"));
  // Framing the gateway did not choose never comes through.
  CHECK(head.find("\r\ntransfer-encoding:") == std::string_view::npos);
  CHECK(head.find("\r\nconnection:") == std::string_view::npos);
  return 0;
}
