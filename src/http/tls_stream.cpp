// Stream's TLS operations (stream.hpp): OpenSSL on the connection's non-blocking socket, each
// operation tried at once and, when OpenSSL wants the socket readable or writable, tried again
// when the reactor says it is.
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <boost/asio/compose.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>

#include "stream.hpp"

namespace tollgate::http {

namespace net = boost::asio;
using boost::system::error_code;

namespace {

enum class Want : uint8_t { kNothing, kRead, kWrite };

struct Outcome {
  Want want = Want::kNothing;
  error_code ec;
};

// Empties this thread's OpenSSL error queue, which must be empty before an I/O call for
// SSL_get_error() to be reliable. After() leaves it empty; peeking first skips the cost of
// clearing an empty queue on every read and write.
void ClearErrors() {
  if (ERR_peek_error() != 0) ERR_clear_error();
}

// What an OpenSSL call's result `ret` means for the operation. A peer that closed, with or
// without TLS's close_notify, is the end of the stream, as for a plaintext socket.
Outcome After(SSL* ssl, int ret) {
  const int saved_errno = errno;
  switch (SSL_get_error(ssl, ret)) {
    case SSL_ERROR_WANT_READ:
      return {Want::kRead, {}};
    case SSL_ERROR_WANT_WRITE:
      return {Want::kWrite, {}};
    case SSL_ERROR_ZERO_RETURN:
      return {Want::kNothing, net::error::eof};
    case SSL_ERROR_SYSCALL:
      ERR_clear_error();
      if (saved_errno == 0) return {Want::kNothing, net::error::eof};
      return {Want::kNothing, error_code(saved_errno, net::error::get_system_category())};
    default: {
      const unsigned long e = ERR_peek_last_error();
      ERR_clear_error();
      if (ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING)
        return {Want::kNothing, net::error::eof};
      if (e == 0) return {Want::kNothing, net::error::connection_reset};
      return {Want::kNothing, error_code(static_cast<int>(e), net::error::get_ssl_category())};
    }
  }
}

// A write's bytes as one TLS call takes them: the first buffer, or, when it is small and more
// follow, as much of them as fits one record, copied together (a head and a short body go out
// as one record). The same buffers give the same bytes: a write OpenSSL could not finish is
// retried with them, as it requires.
constexpr size_t kRecord = 16 * 1024;

net::const_buffer Take(const tls_ops::WriteBuffers& w, std::array<char, kRecord>& copy) {
  if (w.n == 0) return {};
  if (w.n == 1 || w.b[0].size() >= kRecord) return w.b[0];
  size_t used = 0;
  for (size_t i = 0; i < w.n && used < copy.size(); ++i) {
    const size_t k = std::min(w.b[i].size(), copy.size() - used);
    std::memcpy(copy.data() + used, w.b[i].data(), k);
    used += k;
  }
  return {copy.data(), used};
}

thread_local std::array<char, kRecord> write_copy;

Outcome TryWrite(SSL* ssl, const tls_ops::WriteBuffers& w, size_t& written) {
  const net::const_buffer b = Take(w, write_copy);
  written = 0;
  if (b.size() == 0) return {};
  ClearErrors();
  errno = 0;
  const int ret = SSL_write_ex(ssl, b.data(), b.size(), &written);
  if (ret == 1) return {};
  return After(ssl, ret);
}

// One operation: Try() until it needs nothing more, waiting for the socket in between. An
// outcome reached at once is delivered through the executor, never from within the call that
// started the operation.
template <class Op>
struct Composed {
  Stream& s;
  Op op;
  int state = 0;  // 0: not tried yet; 1: waited on the socket; 2: done, posted
  Outcome result;
  size_t n = 0;

  template <class Self>
  void operator()(Self& self, error_code ec = {}) {
    if (state == 2) return Complete(self);
    const bool first = state == 0;
    state = 1;
    if (ec) {
      result = {Want::kNothing, ec};
    } else {
      result = op.Try(s, n);
      if (result.want != Want::kNothing) {
        return s.async_wait(
            result.want == Want::kRead ? net::socket_base::wait_read : net::socket_base::wait_write,
            std::move(self));
      }
    }
    if (!first) return Complete(self);
    state = 2;
    net::post(s.get_executor(), std::move(self));
  }

  template <class Self>
  void Complete(Self& self) {
    if constexpr (Op::kHasSize) {
      self.complete(result.ec, n);
    } else {
      self.complete(result.ec);
    }
  }
};

struct ReadTry {
  static constexpr bool kHasSize = true;
  net::mutable_buffer b;
  Outcome Try(Stream& s, size_t& n) const {
    n = 0;
    if (b.size() == 0) return {};
    ClearErrors();
    errno = 0;
    const int ret = SSL_read_ex(s.ssl(), b.data(), b.size(), &n);
    if (ret == 1) return {};
    return After(s.ssl(), ret);
  }
};

struct WriteTry {
  static constexpr bool kHasSize = true;
  tls_ops::WriteBuffers w;
  Outcome Try(Stream& s, size_t& n) const { return TryWrite(s.ssl(), w, n); }
};

struct HandshakeTry {
  static constexpr bool kHasSize = false;
  Outcome Try(Stream& s, size_t& /*n*/) const {
    ClearErrors();
    errno = 0;
    const int ret = SSL_do_handshake(s.ssl());
    if (ret == 1) return {};
    return After(s.ssl(), ret);
  }
};

}  // namespace

bool Stream::StartTls(ssl_ctx_st* ctx, bool server) {
  SSL* ssl = SSL_new(ctx);
  if (!ssl) return false;
  if (SSL_set_fd(ssl, static_cast<int>(native_handle())) != 1) {
    SSL_free(ssl);
    return false;
  }
  SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (server) {
    SSL_set_accept_state(ssl);
  } else {
    SSL_set_connect_state(ssl);
  }
  ssl_ = ssl;
  return true;
}

std::string_view Stream::ServerName() const {
  const char* name = ssl_ ? SSL_get_servername(ssl_, TLSEXT_NAMETYPE_host_name) : nullptr;
  return name ? std::string_view(name) : std::string_view();
}

std::string_view Stream::Alpn() const {
  if (!ssl_) return {};
  const unsigned char* p = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl_, &p, &len);
  return p ? std::string_view(reinterpret_cast<const char*>(p), len) : std::string_view();
}

namespace tls_ops {

void AsyncRead(Stream& s, net::mutable_buffer b, ReadHandler h) {
  net::async_compose<ReadHandler, void(error_code, size_t)>(Composed<ReadTry>{s, {b}}, h, s);
}

void AsyncWrite(Stream& s, const WriteBuffers& b, ReadHandler h) {
  net::async_compose<ReadHandler, void(error_code, size_t)>(Composed<WriteTry>{s, {b}}, h, s);
}

void AsyncHandshake(Stream& s, HandshakeHandler h) {
  net::async_compose<HandshakeHandler, void(error_code)>(Composed<HandshakeTry>{s, {}}, h, s);
}

error_code WriteNow(Stream& s, const WriteBuffers& b, size_t& written) {
  const Outcome o = TryWrite(s.ssl(), b, written);
  return o.ec;
}

void Free(ssl_st* ssl) { SSL_free(ssl); }

void CloseNotify(Stream& s) {
  SSL* ssl = s.ssl();
  if (!SSL_is_init_finished(ssl)) return;
  ERR_clear_error();
  SSL_shutdown(ssl);  // marks it sent even when the socket takes nothing now
  ERR_clear_error();
}

bool StayedQuiet(Stream& s) {
  char byte;
  size_t n = 0;
  ClearErrors();
  errno = 0;
  const int ret = SSL_peek_ex(s.ssl(), &byte, 1, &n);
  if (ret == 1) return false;  // application data nobody asked for
  const Outcome o = After(s.ssl(), ret);
  return !o.ec && o.want == Want::kRead;
}

bool IsTlsError(const error_code& ec) { return ec.category() == net::error::get_ssl_category(); }

}  // namespace tls_ops

}  // namespace tollgate::http
