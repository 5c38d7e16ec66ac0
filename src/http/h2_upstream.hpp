// An upstream spoken to over HTTP/2 (upstream.http2, issue 34; gRPC needs it): one connection
// per worker and endpoint, h2 by ALPN over TLS or h2c with prior knowledge, carrying each request
// of the pool as one stream. The pool's connections to it are lanes (docs/adr/0005): one end of an
// in-process socket pair on which the pool speaks HTTP/1.1 as to any upstream. The other end is
// read here: each request sent as a stream, its response written back as HTTP/1.1 (chunked, its
// trailers in the last chunk). Included by upstream_pool.cpp only (nghttp2 stays in the .cpp).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "conn.hpp"

namespace tollgate::http {

class H2Upstream {
 public:
  struct Options {
    std::string host, port;           // resolved at each connection
    std::string scheme;               // :scheme, "https" or "http"
    milliseconds connect_timeout{0};  // to connect (and shake hands)
    milliseconds write_timeout{0};    // of a write to the upstream, or to a lane
    // h2: starts TLS (ALPN h2) on a new connection's stream; null: h2c.
    std::function<bool(Stream&)> start_tls;
  };
  H2Upstream(net::io_context& ioc, ConnList& conns, Options options);
  ~H2Upstream();
  H2Upstream(const H2Upstream&) = delete;
  H2Upstream& operator=(const H2Upstream&) = delete;

  // A lane to the upstream, once its connection is up (made now if none is, within the connect
  // timeout); false with `ec` when it could not be (or the upstream did not agree to h2).
  net::awaitable<bool> OpenLane(tcp::socket& lane, beast::error_code& ec);

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tollgate::http
