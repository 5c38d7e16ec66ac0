// TLS to Redis (rediss://, rediss-cluster://), through Asio's OpenSSL streams.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <memory>
#include <string>
#include <tollgate/core/result.hpp>
#include <tollgate/store/redis_store.hpp>

namespace tollgate::store::redis {

using TlsStream = boost::asio::ssl::stream<boost::asio::ip::tcp::socket>;

// The client context of a store: verifies the server against `tls_ca_file` (the system's CAs
// when empty), TLS 1.2 at least; presents `tls_cert_file` and `tls_key_file` when given. Errors
// name the option: "store.tls.ca_file: cannot load '...': ...".
core::Result<std::unique_ptr<boost::asio::ssl::context>> MakeTlsContext(
    const RedisStoreOptions& options);

// A stream for one connection to `host` (the URL's host name or address): SNI for a name, and
// the server's certificate must name `host`.
std::shared_ptr<TlsStream> MakeTlsStream(boost::asio::io_context& ioc,
                                         boost::asio::ssl::context& context,
                                         const std::string& host);

}  // namespace tollgate::store::redis
