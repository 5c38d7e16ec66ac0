#include "tunnel.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>

#include "relay.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace tollgate::http {

void Tunnels::CloseAll() {
  // Close() leaves the list as it is: the tunnels leave it when their requests end.
  for (Tunnel* t = head_; t; t = t->next_) t->Close();
}

Tunnel::Tunnel(Tunnels& list, Conn& client, beast::flat_buffer& client_buffer, Conn& upstream,
               beast::flat_buffer& upstream_buffer, milliseconds idle_timeout, Counters counters)
    : list_(list),
      next_(list.head_),
      client_{client, client_buffer, true},
      upstream_{upstream, upstream_buffer, false},
      idle_timeout_(idle_timeout),
      counters_(counters) {
  if (next_) next_->prev_ = this;
  list_.head_ = this;
  list_.count_.fetch_add(1, std::memory_order_relaxed);
}

Tunnel::~Tunnel() {
  (prev_ ? prev_->next_ : list_.head_) = next_;
  if (next_) next_->prev_ = prev_;
  list_.count_.fetch_sub(1, std::memory_order_relaxed);
  for (Side* s : {&client_, &upstream_}) s->conn.socket.CloseNotify();
}

net::awaitable<Tunnel::End> Tunnel::Run() {
  // From here every end of the client's stream must be seen at once (socket.hpp: a drained read
  // can miss a FIN that came with its bytes).
  client_.conn.socket.DrainedReads(false);
  Touch();
  using namespace net::experimental::awaitable_operators;
  co_await (Pump(client_, upstream_, counters_.to_upstream) &&
            Pump(upstream_, client_, counters_.to_client));
  co_return end_;
}

void Tunnel::Close() { Stop(End::kDrain); }

void Tunnel::Note(End why) {
  if (!std::exchange(noted_, true)) end_ = why;
}

void Tunnel::Stop(End why) {
  Note(why);
  if (std::exchange(stopped_, true)) return;
  beast::error_code ignored;
  client_.conn.socket.cancel(ignored);
  upstream_.conn.socket.cancel(ignored);
}

void Tunnel::Touch() {
  client_.conn.ExpiresAfter(idle_timeout_);
  upstream_.conn.ExpiresAfter(idle_timeout_);
}

// One direction: what `in` sends, written to `out`, a read at a time (at most kRelayChunk
// bytes in memory per direction).
net::awaitable<void> Tunnel::Pump(Side in, Side out, std::atomic<uint64_t>& bytes) {
  const End closed = in.is_client ? End::kClient : End::kUpstream;
  for (;;) {
    if (stopped_) co_return;
    if (in.buffer.size() == 0) {
      auto [rec, n] =
          co_await in.conn.socket.async_read_some(in.buffer.prepare(kRelayChunk), kTuple);
      if (stopped_) co_return;
      const beast::error_code ec = in.conn.Check(rec);
      if (ec == beast::error::timeout || ec == net::error::operation_aborted) {
        Stop(End::kIdleTimeout);  // cancelled by the sweep: no byte moved for the timeout
        co_return;
      }
      if (ec == net::error::eof && !out.conn.socket.tls()) {
        // A half-close, passed on; the other direction goes on until its side closes too.
        Note(closed);
        beast::error_code ignored;
        out.conn.socket.shutdown(tcp::socket::shutdown_send, ignored);
        co_return;
      }
      if (ec) {
        Stop(closed);
        co_return;
      }
      in.buffer.commit(n);
      Touch();
    }
    const size_t n = in.buffer.size();
    beast::buffers_suffix<net::const_buffer> rest(in.buffer.data());
    beast::error_code ec = WriteNow(out.conn.socket, rest);
    if (!ec && beast::buffer_bytes(rest) > 0) {
      auto [wec, written] = co_await net::async_write(out.conn.socket, rest, kTuple);
      if (stopped_) co_return;
      ec = out.conn.Check(wec);
    }
    if (ec) {
      Stop(ec == beast::error::timeout ? End::kIdleTimeout
                                       : (out.is_client ? End::kClient : End::kUpstream));
      co_return;
    }
    in.buffer.consume(n);
    bytes.fetch_add(n, std::memory_order_relaxed);
    Touch();
  }
}

}  // namespace tollgate::http
