// The upstream pool of one worker: idle connections checked before reuse, new ones up to the
// worker's share, and a bounded queue when every one is busy.
#include <sys/socket.h>

#include <cerrno>

#include <boost/asio/connect.hpp>

#include "worker.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace tollgate::http {

namespace {
// Whether nothing arrived on an idle upstream connection: no byte and no end of stream. A
// connection that became readable while idle is never reused: the bytes are a response to
// something the upstream read that we did not send (a GET body it took for a request, issue
// 18), and an EOF means it closed (Node.js closes idle connections after 5 s).
// (internal::RecvNow, as the other reads. The peek is the proxied request's one failed call, as
// nginx's getsockopt(SO_ERROR) of its pooled connection.)
bool StayedQuiet(int fd) {
  char byte;
  const ssize_t n = internal::RecvNow(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

std::unique_ptr<UpstreamConnection> Worker::TakeIdle() {
  while (!idle.empty()) {
    auto c = std::move(idle.back());
    idle.pop_back();
    if (c->conn.socket.is_open() && StayedQuiet(c->conn.socket.native_handle())) return c;
    gw.upstream_stale.fetch_add(1, std::memory_order_relaxed);
    upstream_open.fetch_sub(1, std::memory_order_relaxed);
  }
  return nullptr;
}

void Worker::Release(std::unique_ptr<UpstreamConnection> c, bool reusable) {
  if (c && reusable) {
    idle.push_back(std::move(c));
  } else {
    c.reset();
    upstream_open.fetch_sub(1, std::memory_order_relaxed);
  }
  WakeWaiter();
}

void Worker::WakeWaiter() {
  if (!pool_waiters.empty()) {
    PoolWaiter* w = pool_waiters.front();
    pool_waiters.pop_front();
    pool_waiting.store(pool_waiters.size(), std::memory_order_relaxed);
    w->granted = true;
    w->timer->cancel();
  }
}

Worker::PoolShares Worker::Shares() const {
  const size_t workers = gw.workers.size();
  PoolShares s;
  s.connections = std::max<size_t>(1, gw.upstream_config.max_connections / workers);
  s.queue = gw.upstream_config.queue_size == 0
                ? 0
                : std::max<size_t>(1, gw.upstream_config.queue_size / workers);
  // At least one of each: a pool of one connection is one client's at a time.
  const auto part = [pct = static_cast<size_t>(gw.upstream_config.max_client_share_percent)](
                        size_t n) { return n == 0 ? 0 : std::max<size_t>(1, n * pct / 100); };
  s.client_connections = part(s.connections);
  s.client_queue = part(s.queue);
  return s;
}

net::awaitable<std::unique_ptr<UpstreamConnection>> Worker::Acquire(beast::error_code& ec,
                                                                    bool* pooled, bool* busy,
                                                                    ClientShares::Claim& claim) {
  const PoolShares shares = Shares();
  std::optional<net::steady_timer> timer;
  for (;;) {
    // Also after a wait: the client's other requests may have taken connections meanwhile.
    if (!claim.MayHold(shares.client_connections)) {
      // A connection released for this request is the next waiter's.
      if (timer) WakeWaiter();
      break;
    }
    if (auto c = TakeIdle()) {
      *pooled = true;
      co_return c;
    }
    *pooled = false;
    if (upstream_open.load(std::memory_order_relaxed) < shares.connections) {
      // Counted before the wait, as upstream_open: requests of one client connecting at once
      // cannot overshoot its share.
      claim.Hold();
      auto c = co_await Connect(ec);
      if (!c) claim.Unhold();
      co_return c;
    }
    // Every connection is busy (slow clients reading large responses hold theirs): wait for one,
    // in a bounded queue for a bounded time, rather than fail at once; one client only in its
    // share of the queue.
    if (pool_waiters.size() >= shares.queue || !claim.MayQueue(shares.client_queue)) break;
    if (!timer) {
      timer.emplace(ioc);
      timer->expires_after(milliseconds(gw.upstream_config.queue_timeout_ms));
    }
    PoolWaiter w{&*timer};
    pool_waiters.push_back(&w);
    pool_waiting.store(pool_waiters.size(), std::memory_order_relaxed);
    claim.Queue();
    co_await timer->async_wait(kTuple);
    claim.Unqueue();
    if (!w.granted) {
      pool_waiters.erase(std::find(pool_waiters.begin(), pool_waiters.end(), &w));
      pool_waiting.store(pool_waiters.size(), std::memory_order_relaxed);
      break;
    }
  }
  *busy = true;
  co_return nullptr;
}

net::awaitable<std::unique_ptr<UpstreamConnection>> Worker::Connect(beast::error_code& ec) {
  // The place is taken before the first wait: requests connecting at once cannot overshoot it.
  upstream_open.fetch_add(1, std::memory_order_relaxed);
  struct Undo {
    Worker* w;
    ~Undo() {
      if (w) w->Release(nullptr, false);
    }
  } undo{this};
  auto c = std::make_unique<UpstreamConnection>(conns, ioc);
  tcp::resolver resolver(ioc);
  auto [rec, results] =
      co_await resolver.async_resolve(gw.upstream.endpoint.host, gw.upstream.endpoint.port, kTuple);
  if (rec) {
    ec = rec;
    co_return nullptr;
  }
  c->conn.ExpiresAfter(milliseconds(gw.upstream_config.connect_timeout_ms));
  auto [cec, ep] = co_await net::async_connect(c->conn.socket, results, kTuple);
  if (cec) {
    ec = c->conn.Check(cec);
    co_return nullptr;
  }
  beast::error_code ignored;
  c->conn.socket.set_option(tcp::no_delay(true), ignored);
  c->conn.socket.non_blocking(true, ignored);  // for WriteAll's first attempt
  undo.w = nullptr;
  co_return c;
}

}  // namespace tollgate::http
