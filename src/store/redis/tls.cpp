#include "store/redis/tls.hpp"

#include <boost/asio/ip/address.hpp>

namespace tollgate::store::redis {
namespace {

namespace net = boost::asio;

// The client certificate and its key, when given.
core::Result<bool> UseClientCertificate(net::ssl::context& context, const RedisStoreOptions& o) {
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return core::Error{"store.tls: cert_file and key_file go together"};
  }
  if (o.tls_cert_file.empty()) return true;
  boost::system::error_code ec;
  if (context.use_certificate_chain_file(o.tls_cert_file, ec); ec) {
    return core::Error{"store.tls.cert_file: cannot load '" + o.tls_cert_file +
                       "': " + ec.message()};
  }
  if (context.use_private_key_file(o.tls_key_file, net::ssl::context::pem, ec); ec) {
    return core::Error{"store.tls.key_file: cannot load '" + o.tls_key_file + "': " + ec.message()};
  }
  if (SSL_CTX_check_private_key(context.native_handle()) != 1) {
    return core::Error{"store.tls.key_file: '" + o.tls_key_file + "' is not the key of cert_file"};
  }
  return true;
}

}  // namespace

core::Result<std::unique_ptr<net::ssl::context>> MakeTlsContext(const RedisStoreOptions& o) {
  auto context = std::make_unique<net::ssl::context>(net::ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION);
  context->set_verify_mode(net::ssl::verify_peer);
  boost::system::error_code ec;
  if (o.tls_ca_file.empty()) {
    context->set_default_verify_paths(ec);
    if (ec)
      return core::Error{"store.tls: cannot load the system's CA certificates: " + ec.message()};
  } else if (context->load_verify_file(o.tls_ca_file, ec); ec) {
    return core::Error{"store.tls.ca_file: cannot load '" + o.tls_ca_file + "': " + ec.message()};
  }
  if (auto client = UseClientCertificate(*context, o); !client) return core::Error{client.error()};
  return context;
}

std::shared_ptr<TlsStream> MakeTlsStream(net::io_context& ioc, net::ssl::context& context,
                                         const std::string& host) {
  auto tls = std::make_shared<TlsStream>(ioc, context);
  boost::system::error_code not_ip;
  net::ip::make_address(host, not_ip);
  if (not_ip) SSL_set_tlsext_host_name(tls->native_handle(), host.c_str());  // SNI
  tls->set_verify_callback(net::ssl::host_name_verification(host));
  return tls;
}

}  // namespace tollgate::store::redis
