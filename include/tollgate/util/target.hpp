// The request target made canonical once, so that what is matched against routes, costed, logged
// and forwarded is one and the same string (DESIGN.md, Gateway). A pure function: no I/O, no
// clock, no state.
#pragma once

#include <string>
#include <string_view>

namespace tollgate::util {

// Per listener, from config.
struct TargetOptions {
  // %2F and %5C in the path: kept encoded (hex uppercased) when allowed, else refused. When
  // allowed, the upstream must not decode them into separators. Default: false.
  bool allow_encoded_slash = false;
  // ';' in the path (matrix parameters, Tomcat's "jsessionid"): kept when allowed, else
  // refused. Default: false.
  bool allow_path_parameters = false;
};

// Views into the caller's `raw` (when it was already canonical) or into the caller's `buffer`.
struct CanonicalTarget {
  // Origin-form: `path`, then "?" and `query` when `has_query`. What is forwarded. "*" for
  // "OPTIONS *".
  std::string_view target;
  // Starts with '/' (or is "*"): no "//", no "." or ".." segment, no '#', no byte outside
  // 0x21-0x7e, unreserved characters never percent-encoded, other %XX with uppercase hex.
  // A trailing slash is kept as it came.
  std::string_view path;
  // Without the '?'. Unreserved %XX decoded and other hex uppercased; otherwise byte for byte
  // ('+' stays '+', '&' and '=' as sent). Use ForEachQueryParam (util/query.hpp) to read it.
  std::string_view query;
  // Whether the target had a '?', even with nothing after it: "/x?" stays "/x?".
  bool has_query = false;
  // host[:port] from an absolute-form target ("GET http://api.example.com:8080/x"), as sent;
  // empty otherwise. RFC 9112 §3.2.2: when set, it replaces the Host field.
  std::string_view authority;
};

// Makes `raw`, the target of a request line (RFC 9112 §3.2), canonical. Returns nullptr on
// success, else a short static description of what was refused (the answer is then
// 400 {"code":"invalid_request_target"}). Thread-safe: a pure function.
//
// Accepted: origin-form ("/p?q"); absolute-form with scheme http or https in any case and no
// userinfo ("http://host:8080/p?q", converted to origin-form, an empty path becoming "/");
// "*" for OPTIONS only. Refused: authority-form and CONNECT; '#'; '\'; bytes below 0x21, 0x7f
// and above; '%' not followed by two hex digits; encoded control bytes in the path
// (%00-%1F, %7F; the query carries form text and keeps them encoded); by default %2F, %5C and ';'
// in the path (see TargetOptions); and, whatever the options, a path segment with a "." or ".."
// piece between ';', %3B, %2F or %5C
// ("..;", "..%3B", ".%2F"), which some upstream would read as a dot segment; and the encoded
// UTF-8 of characters that normalise to '.', '/' or '\' (full-width "%EF%BC%8E" and the like).
// Bytes RFC 3986 leaves out but clients send ("[", "]", "|", "{", "}", '"', "^", "`", "<",
// ">") are kept as they are.
// The path: unreserved %XX decoded (so "%2e%2e" is ".."), repeated slashes merged, then dot
// segments removed (RFC 3986 §5.2.4; "/../x" is "/x").
//
// Cost: a target that is already canonical (the common case) is checked in one pass over its
// bytes and returned as views into `raw`, without touching `buffer`. Any other is rewritten into
// `buffer` (cleared first; keep one per connection so that its capacity is reused).
// REQUIRES: `raw` does not point into `buffer`. `out` is valid while `raw` and `buffer` are
// unchanged; on error its contents are unspecified.
const char* CanonicalizeTarget(std::string_view method, std::string_view raw,
                               const TargetOptions& options, std::string& buffer,
                               CanonicalTarget& out);

namespace internal {

// Exposed for the unit tests and the fuzzer, which check that the fast path only ever accepts
// what the full rewrite would leave unchanged.
// Whether `raw` is an origin-form target that CanonicalizeTarget returns unchanged without
// rewriting it (for any options).
bool IsCanonicalFast(std::string_view raw);
// CanonicalizeTarget without the fast path: always rewrites into `buffer`.
const char* CanonicalizeTargetSlow(std::string_view method, std::string_view raw,
                                   const TargetOptions& options, std::string& buffer,
                                   CanonicalTarget& out);

}  // namespace internal

}  // namespace tollgate::util
