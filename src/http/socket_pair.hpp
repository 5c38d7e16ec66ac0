// A lane's two ends (docs/adr/0005): an in-process socket pair. Included by the HTTP/2 code only.
#pragma once

#include <unistd.h>

#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "conn.hpp"

namespace tollgate::http {

namespace internal {
// `s` as `out`, a TCP socket; its descriptor closed when that fails.
inline bool AsTcp(net::local::stream_protocol::socket& s, tcp::socket& out) {
  beast::error_code ec;
  const int fd = s.release(ec);
  if (ec) return false;
  out.assign(tcp::v4(), fd, ec);
  if (ec) {
    ::close(fd);
    return false;
  }
  out.non_blocking(true, ec);
  return !ec;
}

}  // namespace internal

// An in-process socket pair, as two of Asio's TCP sockets (which serve a stream socket of any
// family, so the worker's connection loop takes one as it is). False when the process has no
// descriptors for it.
inline bool OpenSocketPair(const net::any_io_executor& ex, tcp::socket& a, tcp::socket& b) {
  net::local::stream_protocol::socket one(ex), two(ex);
  beast::error_code ec;
  net::local::connect_pair(one, two, ec);
  return !ec && internal::AsTcp(one, a) && internal::AsTcp(two, b);
}

}  // namespace tollgate::http
