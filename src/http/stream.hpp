#pragma once
// A connection's byte stream: its TCP socket (socket.hpp), or TLS on it (issue 33, ADR 4).
//
// One type for both, chosen per connection: a plaintext connection reads and writes the socket
// as before, through one test of a pointer; a TLS one goes through OpenSSL on the same
// non-blocking socket, waiting on the reactor for readiness when OpenSSL asks for it (as nginx
// does: no second buffer between OpenSSL and the socket). OpenSSL stays out of this header: the
// TLS operations are compiled once, in tls_stream.cpp, behind type-erased handlers.
//
// A read first asks OpenSSL, which may hold decrypted bytes the socket will never report again.
// Cancelling the socket (the worker's sweep of deadlines) cancels a TLS operation's wait.

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/system/error_code.hpp>

#include "socket.hpp"

struct ssl_st;      // OpenSSL's SSL
struct ssl_ctx_st;  // and SSL_CTX

namespace tollgate::http {

class Stream;

namespace tls_ops {
using ReadHandler =
    boost::asio::any_completion_handler<void(boost::system::error_code, std::size_t)>;
using HandshakeHandler = boost::asio::any_completion_handler<void(boost::system::error_code)>;
// At most this many of a write's buffers are taken at once (gathered into one TLS record when
// small: a head and a short body are one record, one system call).
constexpr size_t kMaxWriteBuffers = 16;
struct WriteBuffers {
  std::array<boost::asio::const_buffer, kMaxWriteBuffers> b;
  size_t n = 0;
};
void AsyncRead(Stream& s, boost::asio::mutable_buffer b, ReadHandler h);
void AsyncWrite(Stream& s, const WriteBuffers& b, ReadHandler h);
void AsyncHandshake(Stream& s, HandshakeHandler h);
// Writes what the socket takes now; `written` is what of `b` went out. Would-block is no error.
boost::system::error_code WriteNow(Stream& s, const WriteBuffers& b, size_t& written);
// Whether nothing but TLS's own messages (a TLS 1.3 server's session tickets) arrived on an
// idle connection: no application byte, no close. Takes those messages in.
bool StayedQuiet(Stream& s);
// Whether `ec` is TLS's (a handshake or record refused, a certificate not verified).
bool IsTlsError(const boost::system::error_code& ec);
// Sends TLS's close_notify, one non-blocking attempt, on a connection whose handshake is done:
// the end of a connection we close, which also keeps its session resumable (OpenSSL drops a
// session whose connection ended without one from the server's cache).
void CloseNotify(Stream& s);
void Free(ssl_st* ssl);
}  // namespace tls_ops

class Stream : public internal::Socket {
 public:
  explicit Stream(boost::asio::ip::tcp::socket&& s) : internal::Socket(std::move(s)) {}
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  // A TLS connection still open ends with close_notify (pooled upstream connections, health
  // checks: a connection closed without one is reported as cut short by its peer).
  ~Stream() {
    if (!ssl_) return;
    CloseNotify();
    tls_ops::Free(ssl_);
  }

  // TLS from now on, as the server (or the client) of `ctx`; the handshake is
  // async_handshake()'s. False when OpenSSL could not make the connection's state (out of
  // memory).
  bool StartTls(ssl_ctx_st* ctx, bool server = true);
  bool tls() const { return ssl_ != nullptr; }
  // Before closing the socket: TLS's close_notify (tls_ops::CloseNotify). Nothing on TCP, or
  // once the socket is closed (its descriptor may be another connection's by then).
  void CloseNotify() {
    if (ssl_ && is_open()) tls_ops::CloseNotify(*this);
  }
  ssl_st* ssl() const { return ssl_; }
  // The name the client asked for (SNI), and the protocol ALPN chose; empty when none.
  std::string_view ServerName() const;
  std::string_view Alpn() const;

  template <class Token>
  auto async_handshake(Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [this](auto handler) { tls_ops::AsyncHandshake(*this, std::move(handler)); }, token);
  }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& bs) {
          if (!ssl_) {
            Socket::async_read_some(First<boost::asio::mutable_buffer>(bs), std::move(handler));
          } else {
            tls_ops::AsyncRead(*this, First<boost::asio::mutable_buffer>(bs), std::move(handler));
          }
        },
        token, buffers);
  }

  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& bs) {
          if (!ssl_) {
            Base::async_write_some(bs, std::move(handler));
          } else {
            tls_ops::AsyncWrite(*this, Gather(bs), std::move(handler));
          }
        },
        token, buffers);
  }

  // The first buffers of `bs`, as TLS writes take them.
  template <class ConstBuffers>
  static tls_ops::WriteBuffers Gather(const ConstBuffers& bs) {
    tls_ops::WriteBuffers w;
    for (auto it = boost::asio::buffer_sequence_begin(bs);
         it != boost::asio::buffer_sequence_end(bs) && w.n < w.b.size(); ++it) {
      const boost::asio::const_buffer b = *it;
      if (b.size() > 0) w.b[w.n++] = b;
    }
    return w;
  }

 private:
  // The first non-empty buffer of a sequence (reads fill one at a time, as Asio's do).
  template <class Buffer, class Buffers>
  static Buffer First(const Buffers& bs) {
    for (auto it = boost::asio::buffer_sequence_begin(bs);
         it != boost::asio::buffer_sequence_end(bs); ++it) {
      const Buffer b = *it;
      if (b.size() > 0) return b;
    }
    return Buffer();
  }

  ssl_st* ssl_ = nullptr;
};

}  // namespace tollgate::http
