// One served certificate: its chain and private key from PEM files, the names it answers for
// (subjectAltName DNS entries, else the subject's CN) and when it expires (issue 33).
#pragma once

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <tollgate/core/result.hpp>

namespace tollgate::http::tls {

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;

// Immutable once loaded; movable.
class Certificate {
 public:
  // Reads `cert_file` (the leaf, then its intermediates, PEM) and `key_file` (PEM, unencrypted).
  // Refused, with the file and the reason: a missing or unreadable file, no certificate, a key
  // that does not match the leaf, a leaf not yet valid or expired at `now_unix`.
  static core::Result<Certificate> Load(const std::string& cert_file, const std::string& key_file,
                                        int64_t now_unix);

  X509* leaf() const { return leaf_.get(); }
  EVP_PKEY* key() const { return key_.get(); }
  const std::vector<X509Ptr>& chain() const { return chain_; }  // intermediates, in file order
  // Lower-case DNS names, wildcards as written ("*.example.com").
  const std::vector<std::string>& names() const { return names_; }
  int64_t not_after_unix() const { return not_after_unix_; }
  std::string_view algorithm() const { return algorithm_; }  // "RSA", "ECDSA", ...
  const std::string& cert_file() const { return cert_file_; }
  const std::string& key_file() const { return key_file_; }

 private:
  X509Ptr leaf_;
  KeyPtr key_;
  std::vector<X509Ptr> chain_;
  std::vector<std::string> names_;
  int64_t not_after_unix_ = 0;
  std::string algorithm_;
  std::string cert_file_, key_file_;
};

// Whether DNS name `pattern` ("api.example.com", "*.example.com") covers the lower-case host
// `name`: exactly, or a wildcard for one whole left-most label ("*.example.com" covers
// "a.example.com", not "example.com" nor "a.b.example.com").
bool NameMatches(std::string_view pattern, std::string_view name);

// The oldest error of this thread's OpenSSL queue as text ("no details" when there is none);
// clears the queue.
std::string OpenSslError();

}  // namespace tollgate::http::tls
