// A TLS listener's OpenSSL context (issue 33): TLS 1.2 and 1.3 only, Mozilla's "intermediate"
// ciphers by default, no renegotiation, session resumption (tickets and a server cache), ALPN,
// and certificates chosen by SNI. Reload() swaps in newly loaded files for new handshakes only:
// a connection keeps the certificate it was served, and files that cannot be loaded are refused
// while the certificates before keep serving. OpenSSL stays out of widely included headers:
// only the TLS transport includes this one.
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <tollgate/core/result.hpp>

#include "http/tls/certificate_set.hpp"

namespace tollgate::http::tls {

// Mozilla's "intermediate" TLS 1.2 list (TLS 1.3's suites are OpenSSL's defaults).
inline constexpr char kIntermediateCiphers[] =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"
    "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-CHACHA20-POLY1305";

// Client certificates (mTLS): not asked for, asked for, or required.
enum class ClientAuth { kOff, kOptional, kRequired };

struct ServerOptions {
  struct Files {
    std::string cert_file;  // the leaf, then its intermediates (PEM)
    std::string key_file;   // PEM, unencrypted
  };
  std::vector<Files> certificates;             // REQUIRED: at least one; the first is the default
  int min_version = TLS1_2_VERSION;            // TLS1_2_VERSION or TLS1_3_VERSION
  std::string ciphers = kIntermediateCiphers;  // TLS 1.2
  std::string ciphersuites;                    // TLS 1.3; empty: OpenSSL's
  // A client naming (SNI) a host no certificate covers: refused (handshake alert) instead of
  // served the default certificate.
  bool refuse_unknown_names = false;
  bool session_tickets = true;
  // A certificate a client sends must chain to client_ca_file (PEM; REQUIRED unless kOff) or the
  // handshake fails; kRequired also fails it when the client sends none.
  ClientAuth client_auth = ClientAuth::kOff;
  std::string client_ca_file;
  std::vector<std::string> alpn = {"http/1.1"};  // in order of preference
};

// Counters for /metrics. Thread-safe.
struct ServerStats {
  std::atomic<uint64_t> reloads_ok{0};
  std::atomic<uint64_t> reloads_error{0};  // refused: the certificates before keep serving
  std::atomic<uint64_t> unknown_names{0};  // handshakes refused for an SNI no certificate covers
};

// Thread-safe: handshakes on any thread, Reload() on another.
class ServerContext {
 public:
  // Errors name the file and the reason (options invalid, a certificate refused).
  static core::Result<std::unique_ptr<ServerContext>> Create(ServerOptions options,
                                                             int64_t now_unix);
  ~ServerContext();
  ServerContext(const ServerContext&) = delete;
  ServerContext& operator=(const ServerContext&) = delete;

  // The context new connections start from (SSL_new); its SNI callback switches each to the
  // chosen certificate's context.
  SSL_CTX* native() const { return base_; }
  // Loads every certificate again; when one is refused, the error names it and nothing changes.
  std::optional<core::Error> Reload(int64_t now_unix);
  // Whether a file changed since the last load (inode, size or mtime of what its path resolves
  // to now: a symlink swap, as Kubernetes does, counts) and stayed as it is since the call
  // before: a certificate and its key written one after the other are loaded together, not
  // refused in between.
  bool FilesChanged() const;
  // The soonest expiry of the certificates served now.
  int64_t FirstExpiryUnix() const;
  const ServerStats& stats() const { return stats_; }

 private:
  struct Served;  // a CertificateSet and a context per certificate
  ServerContext(ServerOptions options, SSL_CTX* base);
  core::Result<std::shared_ptr<const Served>> Load(int64_t now_unix) const;
  std::shared_ptr<const Served> Current() const;
  static int OnServerName(SSL* ssl, int* alert, void* arg);
  const ServerOptions options_;
  SSL_CTX* const base_;
  const std::string alpn_wire_;  // options_.alpn in ALPN's wire form (length-prefixed)
  mutable std::mutex mu_;
  std::shared_ptr<const Served> served_;  // under mu_
  struct FileState {
    std::string path;
    uint64_t dev = 0, ino = 0, size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const FileState&) const = default;
  };
  static std::vector<FileState> StatFiles(const ServerOptions& options);
  std::vector<FileState> files_;         // as of the last load; under mu_
  mutable std::vector<FileState> seen_;  // as of the last FilesChanged(); under mu_
  mutable ServerStats stats_;
};

}  // namespace tollgate::http::tls
