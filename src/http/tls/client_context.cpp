#include "http/tls/client_context.hpp"

#include <arpa/inet.h>
#include <openssl/x509v3.h>

#include "http/tls/certificate.hpp"

namespace tollgate::http::tls {

namespace {

int context_index = -1;  // ex_data of SSL_CTX: its ClientContext

bool IsAddress(const std::string& name) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

}  // namespace

ClientContext::ClientContext(ClientOptions options, SSL_CTX* ctx)
    : options_(std::move(options)), ctx_(ctx), name_is_address_(IsAddress(options_.server_name)) {}

ClientContext::~ClientContext() {
  if (last_session_) SSL_SESSION_free(last_session_);
  SSL_CTX_free(ctx_);
}

core::Result<std::unique_ptr<ClientContext>> ClientContext::Create(ClientOptions options) {
  if (options.server_name.empty()) return core::Error{"tls: no server name"};
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) return core::Error{"tls: " + OpenSslError()};
  std::unique_ptr<ClientContext> c(new ClientContext(std::move(options), ctx));
  const ClientOptions& o = c->options_;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // An upstream closing without close_notify ends the stream, as on the listeners and as nginx
  // takes it: a body framed by that close is taken as whole (many servers never send one).
  SSL_CTX_set_options(
      ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF);
  if (o.verify) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    const int loaded = o.ca_file.empty()
                           ? SSL_CTX_set_default_verify_paths(ctx)
                           : SSL_CTX_load_verify_locations(ctx, o.ca_file.c_str(), nullptr);
    if (loaded != 1) {
      return core::Error{(o.ca_file.empty() ? std::string("the system's CAs") : o.ca_file) + ": " +
                         OpenSslError()};
    }
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  if (!o.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, o.cert_file.c_str()) != 1)
      return core::Error{o.cert_file + ": " + OpenSslError()};
    if (SSL_CTX_use_PrivateKey_file(ctx, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
      return core::Error{o.key_file + ": " + OpenSslError()};
    if (SSL_CTX_check_private_key(ctx) != 1)
      return core::Error{o.key_file + ": the key does not match " + o.cert_file};
  }
  static const unsigned char kAlpn[] = "\x08http/1.1";
  SSL_CTX_set_alpn_protos(ctx, kAlpn, sizeof kAlpn - 1);
  // Resumption: the last session the upstream gave, offered by the next connection.
  static std::once_flag once;
  std::call_once(once, [] {
    context_index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  });
  SSL_CTX_set_ex_data(ctx, context_index, c.get());
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, OnNewSession);
  return c;
}

int ClientContext::OnNewSession(SSL* ssl, SSL_SESSION* session) {
  auto* self =
      static_cast<ClientContext*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), context_index));
  if (!self) return 0;
  // A copy of its own: the connection's session is marked not resumable when that connection
  // ends badly, and it changes while the connection lives; the copy is shared read-only.
  SSL_SESSION* copy = SSL_SESSION_dup(session);
  if (!copy) return 0;
  std::lock_guard lock(self->mu_);
  if (self->last_session_) SSL_SESSION_free(self->last_session_);
  self->last_session_ = copy;
  return 0;  // the connection's own reference stays OpenSSL's
}

bool ClientContext::Prepare(SSL* ssl) const {
  const std::string& name = options_.server_name;
  if (!name_is_address_ && SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) return false;
  if (options_.verify) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    const int ok = name_is_address_ ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str())
                                    : X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
    if (ok != 1) return false;
  }
  std::lock_guard lock(mu_);
  if (last_session_) SSL_set_session(ssl, last_session_);
  return true;
}

}  // namespace tollgate::http::tls
