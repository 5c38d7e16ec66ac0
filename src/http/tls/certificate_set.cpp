#include "http/tls/certificate_set.hpp"

#include <algorithm>
#include <string>

#include <tollgate/util/ascii.hpp>

namespace tollgate::http::tls {

CertificateSet::CertificateSet(std::vector<Certificate> certificates, bool refuse_unknown)
    : certificates_(std::move(certificates)), refuse_unknown_(refuse_unknown) {}

const Certificate* CertificateSet::Select(std::string_view host_name) const {
  if (host_name.empty()) return &certificates_.front();
  std::string name = util::AsciiLower(host_name);
  if (!name.empty() && name.back() == '.') name.pop_back();  // a fully qualified spelling
  for (const Certificate& c : certificates_) {
    for (const std::string& n : c.names()) {
      if (n == name) return &c;
    }
  }
  for (const Certificate& c : certificates_) {
    for (const std::string& n : c.names()) {
      if (NameMatches(n, name)) return &c;
    }
  }
  return refuse_unknown_ ? nullptr : &certificates_.front();
}

int64_t CertificateSet::FirstExpiryUnix() const {
  int64_t first = INT64_MAX;
  for (const Certificate& c : certificates_) first = std::min(first, c.not_after_unix());
  return first;
}

}  // namespace tollgate::http::tls
