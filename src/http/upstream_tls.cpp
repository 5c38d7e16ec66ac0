#include "upstream_tls.hpp"

#include <openssl/ssl.h>

#include "http/tls/client_context.hpp"

namespace tollgate::http {

core::Result<std::unique_ptr<UpstreamTls>> UpstreamTls::Create(const config::UpstreamConfig& config,
                                                               std::string_view host) {
  const auto& t = config.tls;
  tls::ClientOptions o{.verify = t.verify,
                       .ca_file = t.ca_file,
                       .server_name = t.server_name.empty() ? std::string(host) : t.server_name,
                       .cert_file = t.cert_file,
                       .key_file = t.key_file};
  auto ctx = tls::ClientContext::Create(std::move(o));
  if (!ctx) return core::Error{ctx.error()};
  return std::unique_ptr<UpstreamTls>(new UpstreamTls(std::move(ctx).value()));
}

UpstreamTls::UpstreamTls(std::unique_ptr<tls::ClientContext> ctx) : ctx_(std::move(ctx)) {}
UpstreamTls::~UpstreamTls() = default;

bool UpstreamTls::Start(Stream& s, bool h2) const {
  static constexpr unsigned char kH2[] = {2, 'h', '2'};
  return s.StartTls(ctx_->native(), /*server=*/false) && ctx_->Prepare(s.ssl()) &&
         (!h2 || SSL_set_alpn_protos(s.ssl(), kH2, sizeof kH2) == 0);
}

}  // namespace tollgate::http
