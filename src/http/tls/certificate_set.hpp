// The certificates a TLS listener serves, chosen by the client's SNI (issue 33): an exact name
// first, then a wildcard for the left-most label, then the default (the first configured), or
// none when the listener refuses names it has no certificate for.
#pragma once

#include <string_view>
#include <vector>

#include "http/tls/certificate.hpp"

namespace tollgate::http::tls {

// Immutable; thread-safe to read.
class CertificateSet {
 public:
  // REQUIRES: at least one certificate. `refuse_unknown`: Select answers null for a name no
  // certificate covers (a client without SNI still gets the default).
  CertificateSet(std::vector<Certificate> certificates, bool refuse_unknown);

  // The certificate for the SNI `host_name` (any case; empty: the client sent none).
  const Certificate* Select(std::string_view host_name) const;
  const std::vector<Certificate>& certificates() const { return certificates_; }
  // The soonest expiry among them.
  int64_t FirstExpiryUnix() const;

 private:
  std::vector<Certificate> certificates_;
  bool refuse_unknown_;
};

}  // namespace tollgate::http::tls
