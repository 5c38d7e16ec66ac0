#include "http/tls/server_context.hpp"

#include <openssl/err.h>
#include <sys/stat.h>

#include <cstring>

namespace tollgate::http::tls {

struct CtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using CtxPtr = std::unique_ptr<SSL_CTX, CtxFree>;

struct ServerContext::Served {
  CertificateSet set;
  std::vector<CtxPtr> contexts;  // contexts[i] serves set.certificates()[i]
};

namespace {

// ALPN: the first of the server's protocols the client offers; none in common: no ALPN (the
// connection goes on as HTTP/1.1).
int OnAlpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
           unsigned int inlen, void* arg) {
  const auto& wire = *static_cast<const std::string*>(arg);
  unsigned char* chosen = nullptr;
  if (SSL_select_next_proto(&chosen, outlen, reinterpret_cast<const unsigned char*>(wire.data()),
                            static_cast<unsigned>(wire.size()), in,
                            inlen) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

// What every context of a listener shares: versions, ciphers, options, ALPN.
std::optional<core::Error> Configure(SSL_CTX* ctx, const ServerOptions& o,
                                     const std::string& alpn) {
  if (SSL_CTX_set_min_proto_version(ctx, o.min_version) != 1)
    return core::Error{"tls: min_version: " + OpenSslError()};
  SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
  if (!o.ciphers.empty() && SSL_CTX_set_cipher_list(ctx, o.ciphers.c_str()) != 1)
    return core::Error{"tls: ciphers: no cipher of the list is known (" + o.ciphers + ")"};
  if (!o.ciphersuites.empty() && SSL_CTX_set_ciphersuites(ctx, o.ciphersuites.c_str()) != 1)
    return core::Error{"tls: ciphersuites: no suite of the list is known (" + o.ciphersuites + ")"};
  // A client that closes without close_notify (most HTTP clients) ends the stream like a TCP
  // close, not with a fatal error, which would drop its session from the cache: HTTP frames its
  // messages, so a truncation cannot pass for a whole one.
  uint64_t options = SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF;
  if (!o.session_tickets) options |= SSL_OP_NO_TICKET;
  SSL_CTX_set_options(ctx, options);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_alpn_select_cb(ctx, OnAlpn, const_cast<std::string*>(&alpn));
  // One session context for all: a session resumes whichever certificate's context the SNI
  // callback switched its connection to.
  static constexpr unsigned char kSessionContext[] = "tollgate";
  SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof kSessionContext - 1);
  return std::nullopt;
}

// Client certificates: verified against the CA file, whose names are also sent to the client
// (the CAs it may choose a certificate from). Read at each load, so a reload picks a new file.
std::optional<core::Error> VerifyClients(SSL_CTX* ctx, const ServerOptions& o) {
  if (o.client_auth == ClientAuth::kOff) return std::nullopt;
  const char* file = o.client_ca_file.c_str();
  if (SSL_CTX_load_verify_locations(ctx, file, nullptr) != 1)
    return core::Error{o.client_ca_file + ": " + OpenSslError()};
  STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(file);
  if (!names) return core::Error{o.client_ca_file + ": no CA certificate in it"};
  SSL_CTX_set_client_CA_list(ctx, names);
  const int mode = o.client_auth == ClientAuth::kRequired
                       ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                       : SSL_VERIFY_PEER;
  SSL_CTX_set_verify(ctx, mode, nullptr);
  return std::nullopt;
}

}  // namespace

namespace {
// Protocol names in ALPN's wire form: each prefixed by its length.
std::string AlpnWire(const std::vector<std::string>& protocols) {
  std::string wire;
  for (const std::string& p : protocols) {
    wire += static_cast<char>(p.size());
    wire += p;
  }
  return wire;
}
}  // namespace

ServerContext::ServerContext(ServerOptions options, SSL_CTX* base)
    : options_(std::move(options)), base_(base), alpn_wire_(AlpnWire(options_.alpn)) {}

ServerContext::~ServerContext() { SSL_CTX_free(base_); }

core::Result<std::unique_ptr<ServerContext>> ServerContext::Create(ServerOptions options,
                                                                   int64_t now_unix) {
  if (options.certificates.empty()) return core::Error{"tls: no certificate"};
  if (options.min_version != TLS1_2_VERSION && options.min_version != TLS1_3_VERSION)
    return core::Error{"tls: min_version must be TLS 1.2 or 1.3"};
  for (const std::string& p : options.alpn) {
    if (p.empty() || p.size() > 255) return core::Error{"tls: alpn: a protocol of 1-255 bytes"};
  }
  SSL_CTX* base = SSL_CTX_new(TLS_server_method());
  if (!base) return core::Error{"tls: " + OpenSslError()};
  std::unique_ptr<ServerContext> c(new ServerContext(std::move(options), base));
  if (auto e = Configure(base, c->options_, c->alpn_wire_)) return *e;
  // Resumption: tickets (keys of this context, kept across reloads: the certificates' contexts
  // come and go, the sessions' context stays) and a server-side cache for clients without.
  SSL_CTX_set_session_cache_mode(base, SSL_SESS_CACHE_SERVER);
  // A resumed session keeps the client certificate it was verified with: with client
  // certificates, sessions last 5 minutes (not OpenSSL's 2 hours), so a CA taken out of the CA
  // file, or a certificate expired, stops being accepted within that.
  if (c->options_.client_auth != ClientAuth::kOff) SSL_CTX_set_timeout(base, 300);
  SSL_CTX_set_tlsext_servername_callback(base, OnServerName);
  SSL_CTX_set_tlsext_servername_arg(base, c.get());
  if (auto e = c->Reload(now_unix)) return *e;
  return c;
}

core::Result<std::shared_ptr<const ServerContext::Served>> ServerContext::Load(
    int64_t now_unix) const {
  std::vector<Certificate> certs;
  for (const ServerOptions::Files& f : options_.certificates) {
    auto c = Certificate::Load(f.cert_file, f.key_file, now_unix);
    if (!c) return core::Error{c.error()};
    certs.push_back(std::move(c).value());
  }
  auto served = std::make_shared<Served>(
      Served{CertificateSet(std::move(certs), options_.refuse_unknown_names), {}});
  for (const Certificate& c : served->set.certificates()) {
    CtxPtr ctx(SSL_CTX_new(TLS_server_method()));
    if (!ctx) return core::Error{"tls: " + OpenSslError()};
    if (auto e = Configure(ctx.get(), options_, alpn_wire_)) return *e;
    if (SSL_CTX_use_certificate(ctx.get(), c.leaf()) != 1 ||
        SSL_CTX_use_PrivateKey(ctx.get(), c.key()) != 1) {
      return core::Error{c.cert_file() + ": " + OpenSslError()};
    }
    for (const X509Ptr& x : c.chain()) {
      if (SSL_CTX_add1_chain_cert(ctx.get(), x.get()) != 1)
        return core::Error{c.cert_file() + ": its chain: " + OpenSslError()};
    }
    if (auto e = VerifyClients(ctx.get(), options_)) return *e;
    served->contexts.push_back(std::move(ctx));
  }
  return std::shared_ptr<const Served>(std::move(served));
}

std::optional<core::Error> ServerContext::Reload(int64_t now_unix) {
  std::vector<FileState> files = StatFiles(options_);
  auto loaded = Load(now_unix);
  if (!loaded) {
    stats_.reloads_error.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard lock(mu_);
    seen_ = files;
    files_ = std::move(files);  // not tried again until they change again
    return core::Error{loaded.error()};
  }
  std::lock_guard lock(mu_);
  if (served_) stats_.reloads_ok.fetch_add(1, std::memory_order_relaxed);
  served_ = std::move(loaded).value();
  seen_ = files;
  files_ = std::move(files);
  return std::nullopt;
}

std::shared_ptr<const ServerContext::Served> ServerContext::Current() const {
  std::lock_guard lock(mu_);
  return served_;
}

int ServerContext::OnServerName(SSL* ssl, int* alert, void* arg) {
  auto* self = static_cast<ServerContext*>(arg);
  const std::shared_ptr<const Served> served = self->Current();
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  const Certificate* chosen = served->set.Select(name ? name : "");
  if (!chosen) {
    self->stats_.unknown_names.fetch_add(1, std::memory_order_relaxed);
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  const size_t i = static_cast<size_t>(chosen - served->set.certificates().data());
  // The connection holds a reference of its own: a reload may free `served` meanwhile.
  SSL_CTX* ctx = served->contexts[i].get();
  SSL_set_SSL_CTX(ssl, ctx);
  // The verify mode is the connection's own, copied from the context it was made with: the
  // client certificate rules are the chosen context's (its CA store is read from it).
  SSL_set_verify(ssl, SSL_CTX_get_verify_mode(ctx), nullptr);
  return SSL_TLSEXT_ERR_OK;
}

std::vector<ServerContext::FileState> ServerContext::StatFiles(const ServerOptions& options) {
  std::vector<const std::string*> paths;
  for (const ServerOptions::Files& f : options.certificates) {
    paths.push_back(&f.cert_file);
    paths.push_back(&f.key_file);
  }
  if (options.client_auth != ClientAuth::kOff) paths.push_back(&options.client_ca_file);
  std::vector<FileState> out;
  for (const std::string* p : paths) {
    FileState s{.path = *p};
    struct stat st {};
    if (::stat(p->c_str(), &st) == 0) {
      s.dev = st.st_dev;
      s.ino = st.st_ino;
      s.size = static_cast<uint64_t>(st.st_size);
      s.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
    }
    out.push_back(std::move(s));
  }
  return out;
}

bool ServerContext::FilesChanged() const {
  std::vector<FileState> now = StatFiles(options_);
  std::lock_guard lock(mu_);
  const bool settled = now == seen_;
  seen_ = std::move(now);
  return settled && seen_ != files_;
}

int64_t ServerContext::FirstExpiryUnix() const { return Current()->set.FirstExpiryUnix(); }

}  // namespace tollgate::http::tls
