// The head of a client's request as the gateway reads it: views into bytes that outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace tollgate::http {

struct RequestHead {
  struct Field {
    std::string_view name, value;
  };
  // Beyond this many fields a head is left to the general parser (ParseRequestHead).
  static constexpr size_t kMaxFields = 48;

  RequestHead() { fields.reserve(kMaxFields); }

  std::string_view method, target;
  unsigned version = 11;   // 10 or 11
  bool keep_alive = true;  // after the version's default and the Connection field
  bool chunked = false;
  std::optional<uint64_t> content_length;
  std::vector<Field> fields;  // in order; cleared, not freed, between requests

  // The value of the first field of this name (any case), empty if none.
  std::string_view Get(std::string_view name) const;
  void Clear();
};

// The head's size as the gateway forwards it: the request line ("METHOD target HTTP/1.1") and a
// "name: value" line per field, each with its CRLF, and the blank line.
size_t ForwardedHeadSize(const RequestHead& head);

enum class HeadParse {
  kComplete,   // `out` holds the head; `*size` bytes of `data` are it, through its blank line
  kNeedMore,   // no blank line yet, and not more than `max_size` bytes
  kNotSimple,  // for the general parser: a body, an unusual or malformed shape, or too large
};

// Parses the head at the start of `data` when it has the shape of almost every API request,
// and nothing looser: "METHOD SP target SP HTTP/1.x" with CRLF line ends, token field names,
// no folded lines, at most kMaxFields fields (and at most `max_fields`), no Transfer-Encoding,
// no Content-Length but 0, at most `max_size` bytes. Anything else is kNotSimple and goes to the
// general parser, which accepts or refuses it (a malformed head is never accepted here).
HeadParse ParseRequestHead(std::string_view data, size_t max_size, RequestHead& out, size_t* size,
                           size_t max_fields = RequestHead::kMaxFields);

// Whether `value`, a comma-separated list (Connection), holds `token` (any case).
bool HasToken(std::string_view value, std::string_view token);

// What RFC 9112 requires of a request's framing and Host before anything else reads it: the
// code of the 400 answer (docs/http-contract.md), or nullptr when the head is acceptable.
// - "invalid_transfer_encoding": Transfer-Encoding other than exactly `chunked` (a final coding
//   that is not chunked, chunked twice, an unknown coding), or any in HTTP/1.0. Read as having
//   no body, such a request's body would be parsed as the next request (RFC 9112 6.1, 6.3).
// - "invalid_host": HTTP/1.1 without Host, more than one Host, or a Host that is not
//   `host[:port]` (RFC 9112 3.2, RFC 3986 3.2.2: a reg-name, an IPv4 address or [IPv6]).
// Sets `*host` to the Host value (empty when there is none).
const char* CheckRequestHead(const RequestHead& head, std::string_view* host);

// Whether field name `name` reads as `canonical` to an upstream that ignores case and takes
// '_' for '-' (CGI, WSGI, PHP, many frameworks): "X_Tollgate_Key_Id" as "X-Tollgate-Key-Id".
// With `prefix`, whether `name` starts so.
bool ReadsAs(std::string_view name, std::string_view canonical, bool prefix = false);

// Whether `host` is an RFC 3986 host with an optional port (what Host and an absolute-form
// target's authority may hold; no userinfo).
bool IsValidHost(std::string_view host);

}  // namespace tollgate::http
