// What the admin listener asks of a request before any endpoint (issue 31, DNS rebinding):
// a Host on its allow-list, and for a request that changes something, the bearer token.
// Pure (no I/O); docs/http-contract.md, "The admin listener".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <tollgate/http/request_head.hpp>

namespace tollgate::http {

// Immutable once built: thread-safe.
class AdminGuard {
 public:
  // `listen`: server.admin_listen (host:port); `names`: server.admin_hosts; `token`:
  // server.admin_token (empty: none is asked).
  AdminGuard(std::string_view listen, const std::vector<std::string>& names, std::string token);

  // Whether a Host value (or an absolute-form target's authority) names this listener:
  // `localhost`, a loopback address (127.0.0.0/8, [::1], [::ffff:127.x.y.z]), the bound
  // address (any address when bound to 0.0.0.0 or [::]: an address cannot be rebound), or a
  // configured name; any case, one trailing dot, with any port or none. An address must be
  // written in its plain form (no 0x7f000001, 127.1 or leading zeros; no IPv6 zone). Empty: no.
  bool HostAllowed(std::string_view host) const;

  // Every method but GET and HEAD changes something (reload, deny, reset, POST /json...).
  static bool Mutates(std::string_view method) { return method != "GET" && method != "HEAD"; }

  enum class Token { kOk, kMissing, kInvalid };
  // The request's `Authorization: Bearer <token>` against the configured token: kOk when no
  // token is configured. The scheme in any case (RFC 9110 11.1) and one or more spaces after
  // it; a second Authorization line, another scheme or a token in the query is not one. The
  // comparison takes the same time whatever the token (digests compared whole).
  Token CheckToken(const RequestHead& head) const;
  bool token_required() const { return !token_digest_.empty(); }

 private:
  std::vector<std::string> names_;  // lower case, no trailing dot; "localhost" and the bound name
  std::vector<std::string> addresses_;  // configured addresses, as 16 bytes (IPv4 mapped)
  std::string bound_;                   // the bound address as 16 bytes (IPv4 mapped), or empty
  bool wildcard_ = false;               // bound to 0.0.0.0, [::] or every address
  std::string token_digest_;            // SHA-256 of the token; empty: none
};

}  // namespace tollgate::http
