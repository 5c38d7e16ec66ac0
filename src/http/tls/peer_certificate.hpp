// What a connection's verified client certificate says (mTLS, issue 33): its fingerprint, its
// subject and the names a key entry may use for it. No OpenSSL in this header.
#pragma once

#include <optional>
#include <string>
#include <vector>

struct ssl_st;

namespace tollgate::http::tls {

struct PeerCertificate {
  std::string sha256_hex;  // SHA-256 of the DER, 64 lower-case hex digits
  std::string subject;     // RFC 2253 ("CN=svc-a,O=Example"); control characters escaped
  // URI subjectAltNames (a SPIFFE ID), then DNS ones (lower case); the subject's CN (lower
  // case) only when there is no subjectAltName.
  std::vector<std::string> names;
};

// The certificate the client sent on `ssl` when it was verified; nullopt when it sent none
// (or when OpenSSL did not verify it, which a handshake of ours never lets through).
std::optional<PeerCertificate> VerifiedPeerCertificate(ssl_st* ssl);

}  // namespace tollgate::http::tls
