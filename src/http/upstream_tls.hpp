// TLS to an https:// upstream (issue 33): what a new upstream connection starts with before its
// first request. OpenSSL stays in upstream_tls.cpp.
#pragma once

#include <memory>
#include <string_view>

#include <tollgate/config/config.hpp>
#include <tollgate/core/result.hpp>

#include "stream.hpp"

namespace tollgate::http {

namespace tls {
class ClientContext;
}

// Thread-safe: used by every worker's pool.
class UpstreamTls {
 public:
  // The context of upstream.tls for the upstream at `host` (the name verified unless
  // upstream.tls.server_name says another). Errors name the file and the reason.
  static core::Result<std::unique_ptr<UpstreamTls>> Create(const config::UpstreamConfig& config,
                                                           std::string_view host);
  ~UpstreamTls();
  UpstreamTls(const UpstreamTls&) = delete;
  UpstreamTls& operator=(const UpstreamTls&) = delete;

  // TLS on `s` as the client, asking for and verifying the name, offering the last session;
  // `h2`: ALPN offers h2 only (upstream.http2).
  bool Start(Stream& s, bool h2 = false) const;

 private:
  explicit UpstreamTls(std::unique_ptr<tls::ClientContext> ctx);
  std::unique_ptr<tls::ClientContext> ctx_;
};

}  // namespace tollgate::http
