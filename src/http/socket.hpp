#pragma once
// A TCP socket that, like nginx, does not try a read it knows would find nothing.
//
// Asio starts every read with a `recv` and waits for epoll only if that finds nothing. Under
// load it usually does find nothing: after a response, the client has not sent its next request
// yet. That is a failed system call per request: 1.93 `recvfrom` per 429 where one succeeds.
//
// Asio's reactor already keeps, per socket, whether a read is worth trying at once: it stops
// trying after a read that reported the socket exhausted, and tries again as soon as epoll
// reports the socket readable, whether or not a read was waiting then. Its own reads report
// exhaustion only at the end of the stream. With DrainedReads(true), reads through
// Socket::async_read_some also report it when they got fewer bytes than they asked for, as
// nginx does: the socket was drained then, and any byte that arrives later is reported by epoll.
// So the next read, whoever makes it, waits for epoll instead of failing first, and no byte is
// missed.
//
// An end of stream can be missed: a peer's FIN that arrived with the bytes such a read took is
// reported by the next read, and by no later epoll event. So this is for the gateway's clients
// only, whose reads all have deadlines: a client that half-closes right after a keep-alive
// request gets its response, and its connection is closed at the idle timeout rather than at
// once. Not for the upstream, whose body may run to the connection's close.
//
// The upstream gets ReadAfterRequest() instead: its next read skips the first try, because it
// cannot find anything: the request was just written, with nothing unread before it and the
// event loop not run since. It reports nothing to the reactor, so later reads are Asio's. A
// peer that had closed while the connection sat in a pool answers the request with a reset,
// which epoll reports.
//
// This relies on Asio's reactor interface (boost/asio/detail), as of Boost 1.81 with epoll; other
// reactors, and sockets Asio has not made non-blocking, take Asio's own read.

#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <utility>

#include <boost/asio/async_result.hpp>
#include <boost/asio/detail/handler_cont_helpers.hpp>
#include <boost/asio/detail/reactor.hpp>
#include <boost/asio/detail/reactor_op.hpp>
#include <boost/asio/detail/socket_ops.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/recycling_allocator.hpp>

namespace tollgate::http::internal {

// recv(2) through syscall(2): libc's recv() is a cancellation point, and its bookkeeping for that
// (of no use here: no thread is ever cancelled) was 1 % of a 429's CPU. Errors as recv()'s.
inline ssize_t RecvNow(int fd, void* data, std::size_t size, int flags = 0) {
  return ::syscall(SYS_recvfrom, fd, data, size, flags, nullptr, nullptr);
}

class Socket : public boost::asio::ip::tcp::socket {
 public:
  using Base = boost::asio::ip::tcp::socket;

  explicit Socket(Base&& s) : Base(std::move(s)) {}

  void DrainedReads(bool on) { drained_reads_ = on; }
  // The next read waits for epoll at once (see above).
  void ReadAfterRequest() { skip_first_try_ = true; }

  using Base::async_read_some;  // other buffer sequences
  template <class Token>
  auto async_read_some(const boost::asio::mutable_buffer& buffer, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const boost::asio::mutable_buffer& b) {
          StartRead(b, std::move(handler));
        },
        token, buffer);
  }

 private:
  bool drained_reads_ = false;
  bool skip_first_try_ = false;

#if defined(BOOST_ASIO_HAS_EPOLL) && !defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT)
  boost::asio::detail::reactor* reactor_ = nullptr;  // its io_context's, looked up on first use
  // Set while StartRead() hands an operation to the reactor, which may try it at once.
  static inline thread_local bool starting_read_ = false;

  template <class Handler>
  class ReadOp;

  template <class Handler>
  void StartRead(const boost::asio::mutable_buffer& b, Handler handler);
#else
  template <class Handler>
  void StartRead(const boost::asio::mutable_buffer& b, Handler handler) {
    Base::async_read_some(b, std::move(handler));
  }
#endif
};

#if defined(BOOST_ASIO_HAS_EPOLL) && !defined(BOOST_ASIO_HAS_IO_URING_AS_DEFAULT)

template <class Handler>
class Socket::ReadOp : public boost::asio::detail::reactor_op {
 public:
  using Allocator = boost::asio::recycling_allocator<ReadOp>;

  ReadOp(int fd, const boost::asio::mutable_buffer& b, bool drained, bool skip_first_try,
         Handler&& handler)
      : reactor_op(boost::system::error_code(), &Perform, &Complete),
        fd_(fd),
        buffer_(b),
        drained_(drained),
        skip_first_try_(skip_first_try),
        handler_(std::move(handler)) {}

 private:
  static status Perform(reactor_op* base) {
    auto* op = static_cast<ReadOp*>(base);
    // The reactor's try from within StartRead(): wait for epoll instead.
    if (op->skip_first_try_ && starting_read_) return not_done;
    for (;;) {
      const ssize_t n = RecvNow(op->fd_, op->buffer_.data(), op->buffer_.size());
      if (n > 0) {
        op->bytes_transferred_ = static_cast<std::size_t>(n);
        // Fewer bytes than asked for: the socket is drained, epoll reports what comes next.
        return op->drained_ && op->bytes_transferred_ < op->buffer_.size() ? done_and_exhausted
                                                                           : done;
      }
      if (n == 0) {
        op->ec_ = boost::asio::error::eof;
        return done_and_exhausted;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return not_done;
      op->ec_ = boost::system::error_code(errno, boost::asio::error::get_system_category());
      return done;
    }
  }

  // `owner` is null when the io_context is destroyed with the operation pending: the handler
  // is then destroyed, not called, as Asio's own operations do.
  static void Complete(void* owner, boost::asio::detail::scheduler_operation* base,
                       const boost::system::error_code& /*unused*/, std::size_t /*unused*/) {
    auto* op = static_cast<ReadOp*>(base);
    Handler handler(std::move(op->handler_));
    const boost::system::error_code ec = op->ec_;
    const std::size_t n = op->bytes_transferred_;
    Allocator alloc;
    op->~ReadOp();
    alloc.deallocate(op, 1);  // before the upcall, which may start the next read
    if (owner) std::move(handler)(ec, n);
  }

  int fd_;
  boost::asio::mutable_buffer buffer_;
  const bool drained_;
  const bool skip_first_try_;
  Handler handler_;
};

template <class Handler>
void Socket::StartRead(const boost::asio::mutable_buffer& b, Handler handler) {
  namespace detail = boost::asio::detail;
  auto& impl = impl_.get_implementation();
  const bool skip_first_try = std::exchange(skip_first_try_, false);
  if (!(drained_reads_ || skip_first_try) || b.size() == 0 || !is_open() ||
      (impl.state_ & detail::socket_ops::non_blocking) == 0) {
    Base::async_read_some(b, std::move(handler));
    return;
  }
  if (!reactor_) {
    reactor_ = &boost::asio::use_service<detail::reactor>(
        boost::asio::query(get_executor(), boost::asio::execution::context));
  }
  const bool continuation = boost_asio_handler_cont_helpers::is_continuation(handler);
  typename ReadOp<Handler>::Allocator alloc;
  ReadOp<Handler>* op = alloc.allocate(1);
  new (op) ReadOp<Handler>(impl.socket_, b, drained_reads_, skip_first_try, std::move(handler));
  starting_read_ = true;
  reactor_->start_op(detail::reactor::read_op, impl.socket_, impl.reactor_data_, op, continuation,
                     /*allow_speculative=*/true);
  starting_read_ = false;
}

#endif

}  // namespace tollgate::http::internal
