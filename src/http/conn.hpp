// The gateway's sockets: a connection with a deadline that its worker's sweep enforces, and an
// awaitable for callback-style operations (the store, the usage meter). Asio only.
#pragma once

#include <chrono>
#include <memory>
#include <type_traits>
#include <utility>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include "stream.hpp"

namespace tollgate::http {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr auto kTuple = net::as_tuple(net::use_awaitable);

// Awaits a callback-style operation: `start(resume)` calls resume(T) once, on any thread; the
// coroutine resumes on its own executor. Not a coroutine itself (one frame fewer per await):
// what `start` refers to must live until the result is awaited.
template <class T, class Start>
net::awaitable<T> Await(Start start) {
  // GCC 12 miscompiles a lambda that owns a std::string moved through a coroutine frame (an
  // invalid free; found by the usage tests): capture references and pointers only.
  static_assert(std::is_trivially_copyable_v<Start>, "capture references or pointers only");
  return net::async_initiate<decltype(net::use_awaitable), void(T)>(
      [start = std::move(start)](auto handler) mutable {
        auto h = std::make_shared<decltype(handler)>(std::move(handler));
        start([h](T value) {
          auto ex = net::get_associated_executor(*h);
          net::post(ex,
                    [h, value = std::move(value)]() mutable { std::move (*h)(std::move(value)); });
        });
      },
      net::use_awaitable);
}

class Conn;

// A worker's connections, and when its sweep last ran: the time deadlines count from.
struct ConnList {
  Conn* head = nullptr;
  Clock::time_point swept_at = Clock::now();
};

// A socket with a deadline. Setting one is two stores: the worker's sweep cancels the operations
// of connections past theirs, which then fail with beast::error::timeout (through Check()).
// Cheaper than a timer armed and cancelled around every read and write; and a long deadline
// counts from the last sweep, not from a clock read per operation (a proxied request set four).
// Lives on its worker's thread, linked into the worker's list while it exists.
class Conn {
 public:
  Conn(ConnList& list, tcp::socket s) : socket(std::move(s)), list_(list), next_(list.head) {
    if (next_) next_->prev_ = this;
    list_.head = this;
  }
  explicit Conn(ConnList& list, net::io_context& ioc) : Conn(list, tcp::socket(ioc)) {}
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  ~Conn() {
    (prev_ ? prev_->next_ : list_.head) = next_;
    if (next_) next_->prev_ = prev_;
  }

  // A deadline of ten seconds or more counts from the last sweep: early by the time since it,
  // one sweep interval, or as long as the worker was held up (a reload it builds), a small part
  // of it. A shorter one reads the clock: a held-up worker must not use up a connect timeout.
  void ExpiresAfter(Clock::duration d) {
    deadline_ = (d >= std::chrono::seconds(10) ? list_.swept_at : Clock::now()) + d;
    timed_out_ = false;
  }
  void ExpiresAt(Clock::time_point t) {
    deadline_ = t;
    timed_out_ = false;
  }
  // No deadline: that of a write done is not left to cut a later read short.
  void Disarm() { ExpiresAt(Clock::time_point::max()); }
  // The result of an operation on `socket`: a cancellation by the sweep reads as a timeout.
  beast::error_code Check(beast::error_code ec) const {
    return timed_out_ && ec == net::error::operation_aborted
               ? beast::error_code(beast::error::timeout)
               : ec;
  }
  // Cancels the operations of every connection in `list` past its deadline.
  static void Sweep(ConnList& list, Clock::time_point now) {
    list.swept_at = now;
    for (Conn* c = list.head; c; c = c->next_) {
      if (c->deadline_ > now) continue;
      c->deadline_ = Clock::time_point::max();
      c->timed_out_ = true;
      beast::error_code ignored;
      c->socket.cancel(ignored);
    }
  }

  Stream socket;  // TCP, or TLS on it

 private:
  ConnList& list_;
  Conn* prev_ = nullptr;
  Conn* next_;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool timed_out_ = false;
};

// Deadlines are enforced to within this (and set to within it: see Conn::ExpiresAfter).
constexpr milliseconds kSweepInterval{10};

struct UpstreamConnection {
  UpstreamConnection(ConnList& list, net::io_context& ioc) : conn(list, ioc) {}
  UpstreamConnection(ConnList& list, tcp::socket s) : conn(list, std::move(s)) {}
  Conn conn;
  beast::flat_buffer buffer;
};

}  // namespace tollgate::http
