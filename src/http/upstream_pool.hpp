// One worker's keep-alive connections to the upstream: idle ones checked before reuse, new ones
// up to the worker's share of upstream.max_connections, and a bounded queue (its share of
// upstream.queue_size) when every one is busy.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <tollgate/config/config.hpp>

#include "client_share.hpp"
#include "conn.hpp"

namespace tollgate::http {

class H2Upstream;

struct Endpoint {
  std::string host;
  std::string port;
};

// Not thread-safe; owned by one worker and used on its event loop only. OpenApprox() and
// WaitingApprox() may be read from any thread (GET /metrics).
class UpstreamPool {
 public:
  // A worker's shares of upstream.max_connections and upstream.queue_size, and the most of
  // each one client may hold (upstream.max_client_share_percent).
  struct Shares {
    size_t connections = 1, queue = 0, client_connections = 1, client_queue = 0;
  };
  // The shares of each of `workers` workers: at least one connection each, at least one queue
  // place unless the queue is off (queue_size 0), and at least one of each for a client.
  static Shares SharesOf(const config::UpstreamConfig& config, size_t workers);

  struct Options {
    Shares shares;
    Endpoint endpoint;                // where new connections go (resolved at each Connect)
    milliseconds connect_timeout{0};  // upstream.connect_timeout_ms
    milliseconds queue_timeout{0};    // upstream.queue_timeout_ms: the longest wait in the queue
    // An https:// upstream: starts TLS on a new connection's stream (its context, the name
    // asked for and verified); false when it could not. Null: plaintext.
    std::function<bool(Stream&)> start_tls;
    // upstream.http2: every connection is a lane to one HTTP/2 connection (h2_upstream.hpp).
    bool http2 = false;
    milliseconds write_timeout{0};  // of a write to that connection
  };
  // `conns`: the worker's connections (their deadlines are swept). `stale`: counts the idle
  // connections found closed or readable (tollgate_upstream_stale_total).
  UpstreamPool(net::io_context& ioc, ConnList& conns, Options options,
               std::atomic<uint64_t>& stale);
  ~UpstreamPool();
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  const Shares& shares() const { return options_.shares; }

  // An idle connection that has stayed quiet (no byte, no end of stream since it was released),
  // the last released first; null when there is none. The others are closed.
  std::unique_ptr<UpstreamConnection> TakeIdle();
  // An upstream connection: an idle one of the pool that has stayed quiet, else a new one
  // (Connect), else one released to this request while it waits in the queue. Null with
  // `*busy` when the queue is full or the wait ends first; null with `ec` when Connect fails.
  // `claim`: the client's, whose connections and queue places are bounded too.
  net::awaitable<std::unique_ptr<UpstreamConnection>> Acquire(beast::error_code& ec, bool* pooled,
                                                              bool* busy,
                                                              ClientShares::Claim& claim);
  // A new connection, counted in OpenApprox() from the start; null with `ec` when resolving or
  // connecting fails (or takes longer than the connect timeout).
  net::awaitable<std::unique_ptr<UpstreamConnection>> Connect(beast::error_code& ec);
  // Gives a connection back: to the pool when `reusable`, else closed (null: one that Connect
  // did not make after all); the oldest waiting request gets its turn either way.
  void Release(std::unique_ptr<UpstreamConnection> c, bool reusable);

  // A connection the pool gave out leaves it for good (an upgraded one, issue 33): no longer
  // counted in OpenApprox(); the caller owns it. The oldest waiting request gets its turn.
  void Leave() {
    open_.fetch_sub(1, std::memory_order_relaxed);
    WakeWaiter();
  }

  // Connections open now, idle and busy (tollgate_upstream_connections).
  size_t OpenApprox() const { return open_.load(std::memory_order_relaxed); }
  // Requests waiting in the queue now (tollgate_upstream_queue_waiting).
  size_t WaitingApprox() const { return waiting_.load(std::memory_order_relaxed); }
  size_t IdleCount() const { return idle_.size(); }

 private:
  struct Waiter {
    net::steady_timer* timer;
    bool granted = false;  // a connection was released for it
  };
  void WakeWaiter();  // the oldest waiting request, if any, gets its turn
  void SetWaiting() { waiting_.store(waiters_.size(), std::memory_order_relaxed); }

  net::io_context& ioc_;
  ConnList& conns_;
  const Options options_;
  std::atomic<uint64_t>& stale_;
  std::unique_ptr<H2Upstream> h2_;  // upstream.http2
  std::vector<std::unique_ptr<UpstreamConnection>> idle_;
  std::atomic<size_t> open_{0};  // idle and busy
  std::deque<Waiter*> waiters_;  // oldest first
  std::atomic<size_t> waiting_{0};
};

}  // namespace tollgate::http
