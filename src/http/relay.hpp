// Moving bytes between a client and the upstream: writes that try at once before they wait, a
// body relayed a chunk at a time (a large export never sits in memory whole), and the upstream
// response head read into the connection's buffer. Used by the connection loop and the forwarder.
#pragma once

#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <string>
#include <string_view>

#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/http.hpp>

#include "client_body.hpp"
#include "conn.hpp"
#include "fields.hpp"
#include "upstream_head.hpp"

namespace tollgate::http {

namespace bhttp = boost::beast::http;

constexpr size_t kRelayChunk = 16 * 1024;
constexpr size_t kMaxUpstreamHead = 64 * 1024;

// Writes as much of `rest` as the socket takes at once (sockets are non-blocking) and consumes
// it. A response almost always fits the socket's buffer whole, and written at once it takes no
// operation through the reactor and the executor. Would-block is not an error.
// sendmsg(2) through syscall(2), as socket.hpp reads (no cancellation point), with up to 16
// buffers of `rest` at a time.
// On TLS, what OpenSSL writes now, a record at a time.
template <class Buffers>
beast::error_code WriteNow(Stream& socket, beast::buffers_suffix<Buffers>& rest) {
  if (socket.tls()) {
    while (beast::buffer_bytes(rest) > 0) {
      size_t written = 0;
      const beast::error_code ec = tls_ops::WriteNow(socket, Stream::Gather(rest), written);
      if (ec) return ec;
      if (written == 0) return {};
      rest.consume(written);
    }
    return {};
  }
  std::array<iovec, 16> iov;
  msghdr msg{};
  for (auto it = net::buffer_sequence_begin(rest);
       it != net::buffer_sequence_end(rest) && msg.msg_iovlen < iov.size(); ++it) {
    const net::const_buffer b = *it;
    iov[msg.msg_iovlen++] = {const_cast<void*>(b.data()), b.size()};
  }
  msg.msg_iov = iov.data();
  for (;;) {
    const long n = ::syscall(SYS_sendmsg, socket.native_handle(), &msg, MSG_NOSIGNAL);
    if (n >= 0) {
      rest.consume(static_cast<size_t>(n));
      return {};
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
    return {errno, net::error::get_system_category()};
  }
}

// What WriteNow() left, asynchronously. (Hot paths call this only when something is left: a
// coroutine's frame costs an allocation.)
template <class Buffers>
net::awaitable<beast::error_code> WriteRest(Conn& c, beast::buffers_suffix<Buffers>& rest,
                                            milliseconds timeout) {
  c.ExpiresAfter(timeout);
  auto [ec, n] = co_await net::async_write(c.socket, rest, kTuple);
  co_return c.Check(ec);
}

// All of `bufs`: WriteNow(), then WriteRest() (for responses off the hot paths).
template <class Buffers>
net::awaitable<beast::error_code> WriteAll(Conn& c, const Buffers& bufs, milliseconds timeout) {
  beast::buffers_suffix<Buffers> rest(bufs);
  beast::error_code ec = WriteNow(c.socket, rest);
  if (!ec && beast::buffer_bytes(rest) > 0) ec = co_await WriteRest(c, rest, timeout);
  co_return ec;
}

inline net::awaitable<bool> Write(Conn& stream, const std::string& data, bool keep_alive,
                                  milliseconds timeout = std::chrono::seconds(30)) {
  const beast::error_code ec = co_await WriteAll(stream, net::buffer(data), timeout);
  co_return !ec && keep_alive;
}

template <class Fields>
size_t CountFields(const Fields& f) {
  return static_cast<size_t>(std::distance(f.begin(), f.end()));
}

// The last chunk of a relayed response: its trailer fields, those after the first `head_fields`
// of `m`, but for the framing and hop-by-hop ones.
template <class Message>
std::string LastChunk(const Message& m, size_t head_fields) {
  std::string out = "0\r\n";
  size_t i = 0;
  for (const auto& f : m) {
    if (i++ < head_fields || IsHopByHopOrFraming(f.name_string())) continue;
    out.append(f.name_string()).append(": ").append(f.value()).append("\r\n");
  }
  return out.append("\r\n");
}

// Writes `head`, then the body `p` reads from `in`, to `out`, a chunk at a time (a large export
// never sits in memory whole): in chunked encoding when `chunked`, else as it comes. The head
// goes out with the first chunk, a small message in one write. Each read from `in` waits at most
// `in_timeout`, each write to `out` `out_timeout`. A client's request body is read through
// `client` (ReadBodySome(): its pace and framing, instead of `in_timeout`).
template <bool isRequest, class Allocator>
net::awaitable<beast::error_code> Relay(bhttp::parser<isRequest, bhttp::buffer_body, Allocator>& p,
                                        Conn& in, beast::flat_buffer& in_buf, Conn& out,
                                        std::string_view head, bool chunked,
                                        milliseconds in_timeout, milliseconds out_timeout,
                                        bool* in_failed, ClientBody* client = nullptr) {
  // Allocated when there is a body: most requests have none, and the buffer would make this
  // coroutine's frame too large for Asio to recycle.
  std::unique_ptr<char[]> buf;
  static constexpr std::string_view kCrlf = "\r\n", kLastChunk = "0\r\n\r\n";
  char size_line[24];
  bool last = false;
  // A response's trailer fields (issue 34: "trailers pass"), which Beast's parser adds after the
  // head's: sent on with the last chunk but for the framing and hop-by-hop ones. A request's stay
  // behind (a trailer an upstream merges into its headers would be a header no check saw).
  const size_t head_fields = isRequest ? 0 : CountFields(p.get());
  std::string last_chunk(kLastChunk);
  do {
    size_t n = 0;
    if (!p.is_done()) {
      if (!buf) buf = std::make_unique_for_overwrite<char[]>(kRelayChunk);
      beast::error_code ec;
      if (client) {
        // Not async_read(): it would grow `in_buf` without bound while Beast's parser waits for a
        // line end (issue 31: an endless chunk extension or trailer section past
        // server.body_buffer_bytes), and it never answered bad framing there.
        ec = co_await ReadBodySome(in, in_buf, p, *client, buf.get(), kRelayChunk, &n);
      } else {
        p.get().body().data = buf.get();
        p.get().body().size = kRelayChunk;
        in.ExpiresAfter(in_timeout);
        auto [read_ec, r] = co_await bhttp::async_read(in.socket, in_buf, p, kTuple);
        ec = in.Check(read_ec);
        if (ec == bhttp::error::need_buffer) ec = {};
        n = kRelayChunk - p.get().body().size;
      }
      if (ec) {
        *in_failed = true;
        co_return ec;
      }
    }
    last = p.is_done();
    std::array<net::const_buffer, 5> bufs;  // empty ones are skipped
    bufs[0] = net::buffer(head.data(), head.size());
    head = {};
    if (n > 0) {
      if (chunked) {
        const auto r = std::to_chars(size_line, size_line + sizeof size_line - 2, n, 16);
        std::memcpy(r.ptr, "\r\n", 2);
        bufs[1] = net::buffer(size_line, static_cast<size_t>(r.ptr + 2 - size_line));
        bufs[3] = net::buffer(kCrlf.data(), kCrlf.size());
      }
      bufs[2] = net::buffer(buf.get(), n);
    }
    if (last && chunked) {
      if constexpr (!isRequest) last_chunk = LastChunk(p.get(), head_fields);
      bufs[4] = net::buffer(last_chunk);
    }
    if (net::buffer_size(bufs) == 0) continue;
    beast::buffers_suffix<decltype(bufs)> rest(bufs);
    beast::error_code ec = WriteNow(out.socket, rest);
    if (!ec && beast::buffer_bytes(rest) > 0) ec = co_await WriteRest(out, rest, out_timeout);
    if (ec) co_return ec;
  } while (!last);
  co_return beast::error_code{};
}

inline std::string_view View(const beast::flat_buffer& b) {
  return {static_cast<const char*>(b.data().data()), b.size()};
}

// Reads from `c` into `buf` until `buf` holds a whole head, through its blank line, whose size
// goes to `*head_size`. `after_request`: the request was just written (see
// Socket::ReadAfterRequest()).
inline net::awaitable<beast::error_code> ReadHead(Conn& c, beast::flat_buffer& buf,
                                                  milliseconds timeout, bool after_request,
                                                  size_t* head_size) {
  for (;;) {
    *head_size = HeadEnd(View(buf));
    if (*head_size != std::string_view::npos) co_return beast::error_code{};
    if (buf.size() >= kMaxUpstreamHead) co_return beast::error_code(bhttp::error::header_limit);
    c.ExpiresAfter(timeout);
    if (std::exchange(after_request, false)) c.socket.ReadAfterRequest();
    auto [ec, n] = co_await c.socket.async_read_some(buf.prepare(4096), kTuple);
    if (ec) co_return c.Check(ec);
    buf.commit(n);
  }
}

// Writes `head` and then `length` body bytes from `in` (those already in `in_buf` first) to
// `out`, as they come; each read waits at most `in_timeout`, each write `out_timeout`.
inline net::awaitable<beast::error_code> RelayLength(Conn& in, beast::flat_buffer& in_buf,
                                                     Conn& out, std::string_view head,
                                                     uint64_t length, milliseconds in_timeout,
                                                     milliseconds out_timeout, bool* in_failed) {
  for (;;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(length, in_buf.size()));
    const std::array<net::const_buffer, 2> bufs = {net::buffer(head.data(), head.size()),
                                                   net::buffer(in_buf.data().data(), n)};
    head = {};
    if (net::buffer_size(bufs) > 0) {
      beast::buffers_suffix<decltype(bufs)> rest(bufs);
      beast::error_code ec = WriteNow(out.socket, rest);
      if (!ec && beast::buffer_bytes(rest) > 0) ec = co_await WriteRest(out, rest, out_timeout);
      if (ec) co_return ec;
    }
    in_buf.consume(n);
    length -= n;
    if (length == 0) co_return beast::error_code{};
    in.ExpiresAfter(in_timeout);
    auto [ec, r] = co_await in.socket.async_read_some(
        in_buf.prepare(static_cast<size_t>(std::min<uint64_t>(length, kRelayChunk))), kTuple);
    if (ec) {
      *in_failed = true;
      co_return in.Check(ec);
    }
    in_buf.commit(r);
  }
}

}  // namespace tollgate::http
