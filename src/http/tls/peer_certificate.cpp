#include "http/tls/peer_certificate.hpp"

#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <memory>

#include <tollgate/util/ascii.hpp>

namespace tollgate::http::tls {
namespace {

std::string TextOf(const ASN1_STRING* s) {
  return {reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
          static_cast<size_t>(ASN1_STRING_length(s))};
}

std::vector<std::string> NamesOf(X509* cert) {
  std::vector<std::string> uris, dns;
  auto* sans =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (sans) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(sans, i);
      if (n->type == GEN_URI) uris.push_back(TextOf(n->d.uniformResourceIdentifier));
      if (n->type == GEN_DNS) dns.push_back(util::AsciiLower(TextOf(n->d.dNSName)));
    }
    GENERAL_NAMES_free(sans);
  }
  // The CN only when there is no subjectAltName, as name checks do (RFC 6125): a CA whose names
  // are constrained may still write any CN.
  const bool any_san = !uris.empty() || !dns.empty();
  uris.insert(uris.end(), dns.begin(), dns.end());
  X509_NAME* subject = X509_get_subject_name(cert);
  const int at = any_san ? -1 : X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (at >= 0) {
    uris.push_back(
        util::AsciiLower(TextOf(X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, at)))));
  }
  return uris;
}

std::string SubjectOf(X509* cert) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), &BIO_free);
  if (!bio) return {};
  // RFC 2253 escapes control characters and bytes past ASCII: the text is safe in a header.
  X509_NAME_print_ex(bio.get(), X509_get_subject_name(cert), 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

}  // namespace

std::optional<PeerCertificate> VerifiedPeerCertificate(ssl_st* ssl) {
  if (!ssl) return std::nullopt;
  std::unique_ptr<X509, decltype(&X509_free)> cert(SSL_get1_peer_certificate(ssl), &X509_free);
  if (!cert || SSL_get_verify_result(ssl) != X509_V_OK) return std::nullopt;
  PeerCertificate p;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (X509_digest(cert.get(), EVP_sha256(), md, &len) != 1) return std::nullopt;
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned int i = 0; i < len; ++i) {
    p.sha256_hex += kHex[md[i] >> 4];
    p.sha256_hex += kHex[md[i] & 15];
  }
  p.subject = SubjectOf(cert.get());
  p.names = NamesOf(cert.get());
  return p;
}

}  // namespace tollgate::http::tls
