#include "upstream_pool.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include <boost/asio/connect.hpp>

#include "h2_upstream.hpp"

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

UpstreamPool::Shares UpstreamPool::SharesOf(const config::UpstreamConfig& config, size_t workers) {
  Shares s;
  s.connections = std::max<size_t>(1, config.max_connections / workers);
  s.queue = config.queue_size == 0 ? 0 : std::max<size_t>(1, config.queue_size / workers);
  // At least one of each: a pool of one connection is one client's at a time.
  const auto part = [pct = static_cast<size_t>(config.max_client_share_percent)](size_t n) {
    return n == 0 ? 0 : std::max<size_t>(1, n * pct / 100);
  };
  s.client_connections = part(s.connections);
  s.client_queue = part(s.queue);
  return s;
}

UpstreamPool::UpstreamPool(net::io_context& ioc, ConnList& conns, Options options,
                           std::atomic<uint64_t>& stale)
    : ioc_(ioc), conns_(conns), options_(std::move(options)), stale_(stale) {
  if (options_.http2) {
    h2_ = std::make_unique<H2Upstream>(
        ioc, conns,
        H2Upstream::Options{.host = options_.endpoint.host,
                            .port = options_.endpoint.port,
                            .scheme = options_.start_tls ? "https" : "http",
                            .connect_timeout = options_.connect_timeout,
                            .write_timeout = options_.write_timeout,
                            .start_tls = options_.start_tls});
  }
}

UpstreamPool::~UpstreamPool() = default;

std::unique_ptr<UpstreamConnection> UpstreamPool::TakeIdle() {
  while (!idle_.empty()) {
    auto c = std::move(idle_.back());
    idle_.pop_back();
    Stream& s = c->conn.socket;
    if (s.is_open() && (s.tls() ? tls_ops::StayedQuiet(s) : StayedQuiet(s.native_handle())))
      return c;
    stale_.fetch_add(1, std::memory_order_relaxed);
    open_.fetch_sub(1, std::memory_order_relaxed);
  }
  return nullptr;
}

void UpstreamPool::Release(std::unique_ptr<UpstreamConnection> c, bool reusable) {
  if (c && reusable) {
    idle_.push_back(std::move(c));
  } else {
    c.reset();
    open_.fetch_sub(1, std::memory_order_relaxed);
  }
  WakeWaiter();
}

void UpstreamPool::WakeWaiter() {
  if (!waiters_.empty()) {
    Waiter* w = waiters_.front();
    waiters_.pop_front();
    SetWaiting();
    w->granted = true;
    w->timer->cancel();
  }
}

net::awaitable<std::unique_ptr<UpstreamConnection>> UpstreamPool::Acquire(
    beast::error_code& ec, bool* pooled, bool* busy, ClientShares::Claim& claim) {
  const Shares& shares = options_.shares;
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
    if (open_.load(std::memory_order_relaxed) < shares.connections) {
      // Counted before the wait, as open_: requests of one client connecting at once cannot
      // overshoot its share.
      claim.Hold();
      auto c = co_await Connect(ec);
      if (!c) claim.Unhold();
      co_return c;
    }
    // Every connection is busy (slow clients reading large responses hold theirs): wait for one,
    // in a bounded queue for a bounded time, rather than fail at once; one client only in its
    // share of the queue.
    if (waiters_.size() >= shares.queue || !claim.MayQueue(shares.client_queue)) break;
    if (!timer) {
      timer.emplace(ioc_);
      timer->expires_after(options_.queue_timeout);
    }
    Waiter w{&*timer};
    waiters_.push_back(&w);
    SetWaiting();
    claim.Queue();
    co_await timer->async_wait(kTuple);
    claim.Unqueue();
    if (!w.granted) {
      waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &w));
      SetWaiting();
      break;
    }
  }
  *busy = true;
  co_return nullptr;
}

net::awaitable<std::unique_ptr<UpstreamConnection>> UpstreamPool::Connect(beast::error_code& ec) {
  // The place is taken before the first wait: requests connecting at once cannot overshoot it.
  open_.fetch_add(1, std::memory_order_relaxed);
  struct Undo {
    UpstreamPool* pool;
    ~Undo() {
      if (pool) pool->Release(nullptr, false);
    }
  } undo{this};
  if (h2_) {
    // A lane to the upstream's HTTP/2 connection, spoken to as this one.
    tcp::socket lane(ioc_);
    if (!co_await h2_->OpenLane(lane, ec)) co_return nullptr;
    undo.pool = nullptr;
    co_return std::make_unique<UpstreamConnection>(conns_, std::move(lane));
  }
  auto c = std::make_unique<UpstreamConnection>(conns_, ioc_);
  tcp::resolver resolver(ioc_);
  auto [rec, results] =
      co_await resolver.async_resolve(options_.endpoint.host, options_.endpoint.port, kTuple);
  if (rec) {
    ec = rec;
    co_return nullptr;
  }
  c->conn.ExpiresAfter(options_.connect_timeout);
  auto [cec, ep] = co_await net::async_connect(c->conn.socket, results, kTuple);
  if (cec) {
    ec = c->conn.Check(cec);
    co_return nullptr;
  }
  beast::error_code ignored;
  c->conn.socket.set_option(tcp::no_delay(true), ignored);
  c->conn.socket.non_blocking(true, ignored);  // for WriteAll's first attempt
  if (options_.start_tls) {
    // The handshake within the connect timeout too.
    if (!options_.start_tls(c->conn.socket)) {
      ec = net::error::no_memory;
      co_return nullptr;
    }
    c->conn.ExpiresAfter(options_.connect_timeout);
    auto [hec] = co_await c->conn.socket.async_handshake(kTuple);
    if (hec) {
      ec = c->conn.Check(hec);
      co_return nullptr;
    }
  }
  undo.pool = nullptr;
  co_return c;
}

}  // namespace tollgate::http
