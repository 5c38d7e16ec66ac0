// One HTTP/2 stream of the gateway (issue 34): its request as it arrives and its response as the
// client takes it, and their relay over the stream's lane (h2_connection.hpp), which the
// connection's session (h2_connection.cpp) feeds and drains. Included by h2_connection.cpp only.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include <boost/asio/steady_timer.hpp>

#include "conn.hpp"
#include "h2_head.hpp"
#include "socket_pair.hpp"

namespace tollgate::http {

// A wake-up for one waiting coroutine; one that comes before the wait is kept. Not thread-safe.
class Signal {
 public:
  explicit Signal(const net::any_io_executor& ex) : timer_(ex) {}
  net::awaitable<void> Wait() {
    if (!std::exchange(pending_, false)) {
      timer_.expires_at(Clock::time_point::max());
      co_await timer_.async_wait(kTuple);
      pending_ = false;
    }
  }
  // Whether a Notify() came within `d`.
  net::awaitable<bool> WaitFor(Clock::duration d) {
    if (std::exchange(pending_, false)) co_return true;
    timer_.expires_after(d);
    auto [ec] = co_await timer_.async_wait(kTuple);
    // A Notify() after the timer expired, before this resumed, counts too.
    const bool woke = pending_ || ec == net::error::operation_aborted;
    pending_ = false;
    co_return woke;
  }
  void Notify() {
    pending_ = true;
    timer_.cancel();
  }

 private:
  net::steady_timer timer_;
  bool pending_ = false;
};

struct Lane {
  Lane(ConnList& list, tcp::socket s) : conn(list, std::move(s)) {}
  Conn conn;
  beast::flat_buffer buffer;
};

// One stream of the connection: its request as it arrives, its response as the client takes it.
struct H2Stream {
  H2Stream(const net::any_io_executor& ex, int32_t stream_id)
      : id(stream_id), body_wake(ex), out_wake(ex) {}
  int32_t id;
  std::vector<H2Field> fields;  // the request's header block
  size_t header_bytes = 0;      // as SETTINGS_MAX_HEADER_LIST_SIZE counts them (RFC 9113 6.5.2)
  size_t header_fields = 0;
  bool too_large = false;
  bool in_trailers = false;  // a header block after the first: the request's trailers (dropped)
  H2Request request;
  std::string head;     // the request as HTTP/1.1
  std::string in;       // request body bytes not yet on the lane
  bool in_end = false;  // the client's END_STREAM
  std::string out;      // response body bytes for the client, from out_sent on
  size_t out_sent = 0;
  bool out_end = false;
  std::vector<H2Field> trailers;  // the response's, sent after its last DATA
  bool deferred = false;          // nghttp2 waits for `out` (NGHTTP2_ERR_DEFERRED)
  bool closed = false;            // nghttp2 closed the stream
  bool response_done = false;     // the lane's response ended (or failed)
  bool pump_running = false;
  bool pump_failed = false;
  Lane* lane = nullptr;  // while the stream has one
  Signal body_wake;      // for the request body's pump
  Signal out_wake;       // for the response's reader
};

// What a stream's relay asks of its connection's session. Not thread-safe: the worker's thread.
class H2StreamPort {
 public:
  virtual ~H2StreamPort() = default;
  // The response head of `s` (`fields` without :status); `body`: DATA follows, from s.out.
  virtual void SubmitResponse(H2Stream& s, int status, std::span<const H2Field> fields,
                              bool body) = 0;
  // `n` bytes of the request body are on the lane: the client may send as much again.
  virtual void Consumed(H2Stream& s, size_t n) = 0;
  virtual void MoreOut(H2Stream& s) = 0;              // s.out grew, or ended
  virtual void Reset(H2Stream& s) = 0;                // RST_STREAM INTERNAL_ERROR: the lane failed
  virtual void Spawn(net::awaitable<void> work) = 0;  // a coroutine the connection waits for
  virtual milliseconds SendTimeout() const = 0;       // of a write to the lane
};

// The request of `s` on `lane` (its head, s.head, then its body as it comes) and the lane's
// response back to the client; whether the lane may serve another stream.
net::awaitable<bool> RelayOnLane(std::shared_ptr<H2Stream> s, Lane& lane, H2StreamPort& port);

constexpr size_t kH2OutCap = 64 * 1024;  // response bytes a stream holds for the client

}  // namespace tollgate::http
