#include "http/tls/certificate.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <cstdio>

#include <tollgate/util/ascii.hpp>

namespace tollgate::http::tls {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};

// subjectAltName DNS entries; the subject's CN when there are none.
std::vector<std::string> NamesOf(X509* leaf) {
  std::vector<std::string> names;
  auto* sans =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(leaf, NID_subject_alt_name, nullptr, nullptr));
  if (sans) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(sans, i);
      if (n->type != GEN_DNS) continue;
      const ASN1_IA5STRING* s = n->d.dNSName;
      names.push_back(util::AsciiLower({reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                        static_cast<size_t>(ASN1_STRING_length(s))}));
    }
    GENERAL_NAMES_free(sans);
  }
  if (names.empty()) {
    char cn[256];
    if (X509_NAME_get_text_by_NID(X509_get_subject_name(leaf), NID_commonName, cn, sizeof cn) > 0)
      names.push_back(util::AsciiLower(cn));
  }
  return names;
}

int64_t UnixOf(const ASN1_TIME* t) {
  struct tm tm {};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

}  // namespace

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no details";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

bool NameMatches(std::string_view pattern, std::string_view name) {
  if (pattern.size() > 2 && pattern.substr(0, 2) == "*.") {
    const size_t dot = name.find('.');
    return dot != std::string_view::npos && dot > 0 && name.substr(dot) == pattern.substr(1);
  }
  return pattern == name;
}

core::Result<Certificate> Certificate::Load(const std::string& cert_file,
                                            const std::string& key_file, int64_t now_unix) {
  ERR_clear_error();
  Certificate c;
  c.cert_file_ = cert_file;
  c.key_file_ = key_file;
  std::unique_ptr<BIO, BioFree> certs(BIO_new_file(cert_file.c_str(), "r"));
  if (!certs) return core::Error{cert_file + ": cannot be read (" + OpenSslError() + ")"};
  c.leaf_.reset(PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr));
  if (!c.leaf_) return core::Error{cert_file + ": no PEM certificate"};
  while (X509* x = PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr)) {
    c.chain_.emplace_back(x);
  }
  ERR_clear_error();  // the end of the file reads as an error
  std::unique_ptr<BIO, BioFree> key(BIO_new_file(key_file.c_str(), "r"));
  if (!key) return core::Error{key_file + ": cannot be read (" + OpenSslError() + ")"};
  c.key_.reset(PEM_read_bio_PrivateKey(key.get(), nullptr, nullptr, nullptr));
  if (!c.key_) return core::Error{key_file + ": no unencrypted PEM private key"};
  if (X509_check_private_key(c.leaf_.get(), c.key_.get()) != 1) {
    ERR_clear_error();
    return core::Error{key_file + ": the key does not match the certificate " + cert_file};
  }
  const int64_t not_before = UnixOf(X509_get0_notBefore(c.leaf_.get()));
  c.not_after_unix_ = UnixOf(X509_get0_notAfter(c.leaf_.get()));
  if (now_unix < not_before) return core::Error{cert_file + ": not valid yet"};
  if (now_unix >= c.not_after_unix_) return core::Error{cert_file + ": expired"};
  c.names_ = NamesOf(c.leaf_.get());
  if (c.names_.empty()) return core::Error{cert_file + ": names no host (no DNS SAN, no CN)"};
  switch (EVP_PKEY_base_id(c.key_.get())) {
    case EVP_PKEY_RSA:
      c.algorithm_ = "RSA";
      break;
    case EVP_PKEY_EC:
      c.algorithm_ = "ECDSA";
      break;
    default:
      c.algorithm_ = OBJ_nid2sn(EVP_PKEY_base_id(c.key_.get()));
  }
  return c;
}

}  // namespace tollgate::http::tls
