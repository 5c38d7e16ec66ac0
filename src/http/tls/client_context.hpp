// The OpenSSL context of connections to an https:// upstream (issue 33): TLS 1.2 and 1.3, the
// peer's certificate verified against the system's CAs or a CA file and against the name asked
// for, an optional client certificate, and the last session kept for resumption. Only the
// gateway's wiring includes this header.
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <mutex>
#include <string>

#include <tollgate/core/result.hpp>

namespace tollgate::http::tls {

struct ClientOptions {
  bool verify = true;
  std::string ca_file;      // empty: the system's CAs
  std::string server_name;  // REQUIRED: SNI (unless an address) and the name verified
  std::string cert_file;    // optional client certificate and key (PEM)
  std::string key_file;
};

// Thread-safe.
class ClientContext {
 public:
  // Errors name the file and the reason.
  static core::Result<std::unique_ptr<ClientContext>> Create(ClientOptions options);
  ~ClientContext();
  ClientContext(const ClientContext&) = delete;
  ClientContext& operator=(const ClientContext&) = delete;

  // Makes `ssl` (an SSL of native()) ask for and verify the server name, and offers the last
  // session for resumption. False when OpenSSL refused (out of memory).
  bool Prepare(SSL* ssl) const;
  SSL_CTX* native() const { return ctx_; }
  const ClientOptions& options() const { return options_; }

 private:
  ClientContext(ClientOptions options, SSL_CTX* ctx);
  static int OnNewSession(SSL* ssl, SSL_SESSION* session);
  const ClientOptions options_;
  SSL_CTX* const ctx_;
  const bool name_is_address_;
  mutable std::mutex mu_;
  SSL_SESSION* last_session_ = nullptr;  // under mu_; ours (a reference held)
};

}  // namespace tollgate::http::tls
