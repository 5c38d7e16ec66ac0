#include "http/upstream_pool.hpp"

#include <string>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/write.hpp>

#include <gtest/gtest.h>

namespace tollgate::http {
namespace {

TEST(UpstreamPoolShares, EachWorkerGetsItsPartAndAtLeastOne) {
  config::UpstreamConfig c;
  c.max_connections = 10;
  c.queue_size = 8;
  c.max_client_share_percent = 50;
  const UpstreamPool::Shares s = UpstreamPool::SharesOf(c, 4);
  EXPECT_EQ(s.connections, 2u);
  EXPECT_EQ(s.queue, 2u);
  EXPECT_EQ(s.client_connections, 1u);
  EXPECT_EQ(s.client_queue, 1u);
  // More workers than connections: one each; a client holds at least one.
  c.max_connections = 2;
  c.queue_size = 0;  // no queue
  c.max_client_share_percent = 1;
  const UpstreamPool::Shares few = UpstreamPool::SharesOf(c, 4);
  EXPECT_EQ(few.connections, 1u);
  EXPECT_EQ(few.queue, 0u);
  EXPECT_EQ(few.client_connections, 1u);
  EXPECT_EQ(few.client_queue, 0u);
}

// A pool of one io_context against a listener on 127.0.0.1 of the same loop, which accepts
// and keeps every connection (`accepted`), writing nothing unless the test does.
class UpstreamPoolTest : public ::testing::Test {
 protected:
  UpstreamPoolTest() : acceptor_(ioc_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)) {
    net::co_spawn(ioc_, AcceptAll(), net::detached);
  }

  UpstreamPool::Options Options(size_t connections, size_t queue, size_t client_connections = 100,
                                size_t client_queue = 100) {
    return {.shares = {connections, queue, client_connections, client_queue},
            .endpoint = {"127.0.0.1", std::to_string(acceptor_.local_endpoint().port())},
            .connect_timeout = milliseconds(1000),
            .queue_timeout = milliseconds(200)};
  }

  // Runs `body` as a coroutine on the loop until it ends.
  template <class Body>
  void Run(Body body) {
    bool done = false;
    net::co_spawn(
        ioc_,
        [&]() -> net::awaitable<void> {
          co_await body();
          done = true;
          acceptor_.close();
        },
        net::detached);
    ioc_.run();
    ASSERT_TRUE(done);
  }

  net::awaitable<void> AcceptAll() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(kTuple);
      if (ec) co_return;
      accepted.push_back(std::move(socket));
    }
  }

  net::awaitable<std::unique_ptr<UpstreamConnection>> Acquire(UpstreamPool& pool, bool* busy) {
    beast::error_code ec;
    bool pooled = false;
    ClientShares::Claim claim;
    auto c = co_await pool.Acquire(ec, &pooled, busy, claim);
    EXPECT_FALSE(ec) << ec.message();
    co_return c;
  }

  // One connection made, released to the pool, and accepted by the listener (accepted.back()).
  net::awaitable<void> IdleOne(UpstreamPool& pool) {
    bool busy = false;
    auto c = co_await Acquire(pool, &busy);
    pool.Release(std::move(c), true);
    co_await Pause();
    EXPECT_EQ(pool.IdleCount(), 1u);
    EXPECT_EQ(accepted.size(), 1u);
  }

  // Lets the loop run its other work (the listener's accepts) for a moment.
  net::awaitable<void> Pause(milliseconds d = milliseconds(20)) {
    net::steady_timer t(ioc_, d);
    co_await t.async_wait(kTuple);
  }

  net::io_context ioc_;
  ConnList conns_;
  std::atomic<uint64_t> stale_{0};
  tcp::acceptor acceptor_;
  std::vector<tcp::socket> accepted;
};

TEST_F(UpstreamPoolTest, AReleasedConnectionIsReused) {
  UpstreamPool pool(ioc_, conns_, Options(2, 0), stale_);
  Run([&]() -> net::awaitable<void> {
    bool busy = false;
    auto first = co_await Acquire(pool, &busy);
    EXPECT_NE(first, nullptr);
    EXPECT_EQ(pool.OpenApprox(), 1u);
    UpstreamConnection* const raw = first.get();
    pool.Release(std::move(first), true);
    EXPECT_EQ(pool.IdleCount(), 1u);
    EXPECT_EQ(pool.OpenApprox(), 1u);
    bool pooled = false;
    beast::error_code ec;
    ClientShares::Claim claim;
    auto again = co_await pool.Acquire(ec, &pooled, &busy, claim);
    EXPECT_EQ(again.get(), raw);
    EXPECT_TRUE(pooled);
    // Not reusable: closed, and no longer counted.
    pool.Release(std::move(again), false);
    EXPECT_EQ(pool.IdleCount(), 0u);
    EXPECT_EQ(pool.OpenApprox(), 0u);
  });
  EXPECT_EQ(stale_.load(), 0u);
}

TEST_F(UpstreamPoolTest, AConnectionThatBecameReadableWhileIdleIsNotReused) {
  UpstreamPool pool(ioc_, conns_, Options(2, 0), stale_);
  Run([&]() -> net::awaitable<void> {
    co_await IdleOne(pool);
    // The upstream says something nobody asked for.
    co_await net::async_write(accepted.front(), net::buffer("HTTP/1.1 200 OK\r\n\r\n", 19), kTuple);
    co_await Pause();
    EXPECT_EQ(pool.TakeIdle(), nullptr);
    EXPECT_EQ(pool.OpenApprox(), 0u);
  });
  EXPECT_EQ(stale_.load(), 1u);
}

TEST_F(UpstreamPoolTest, AConnectionTheUpstreamClosedIsNotReused) {
  UpstreamPool pool(ioc_, conns_, Options(2, 0), stale_);
  Run([&]() -> net::awaitable<void> {
    co_await IdleOne(pool);
    accepted.clear();  // closed by the upstream
    co_await Pause();
    EXPECT_EQ(pool.TakeIdle(), nullptr);
  });
  EXPECT_EQ(stale_.load(), 1u);
}

TEST_F(UpstreamPoolTest, NoMoreThanItsShareAndNoQueue) {
  UpstreamPool pool(ioc_, conns_, Options(1, 0), stale_);
  Run([&]() -> net::awaitable<void> {
    bool busy = false;
    auto held = co_await Acquire(pool, &busy);
    EXPECT_NE(held, nullptr);
    EXPECT_FALSE(busy);
    auto none = co_await Acquire(pool, &busy);
    EXPECT_EQ(none, nullptr);
    EXPECT_TRUE(busy);
    EXPECT_EQ(pool.OpenApprox(), 1u);
    pool.Release(std::move(held), true);
  });
}

TEST_F(UpstreamPoolTest, WaitersGetReleasedConnectionsOldestFirst) {
  UpstreamPool pool(ioc_, conns_, Options(1, 2), stale_);
  std::vector<int> order;
  Run([&]() -> net::awaitable<void> {
    bool busy = false;
    auto held = co_await Acquire(pool, &busy);
    // Two requests wait, in this order; a third finds the queue full.
    auto wait = [&](int id) -> net::awaitable<void> {
      bool b = false;
      auto c = co_await Acquire(pool, &b);
      EXPECT_NE(c, nullptr) << id;
      order.push_back(id);
      co_await Pause(milliseconds(5));
      pool.Release(std::move(c), true);
    };
    net::co_spawn(ioc_, wait(1), net::detached);
    net::co_spawn(ioc_, wait(2), net::detached);
    co_await Pause(milliseconds(5));
    EXPECT_EQ(pool.WaitingApprox(), 2u);
    bool full = false;
    EXPECT_EQ(co_await Acquire(pool, &full), nullptr);
    EXPECT_TRUE(full);
    pool.Release(std::move(held), true);
    co_await Pause(milliseconds(50));
    EXPECT_EQ(pool.WaitingApprox(), 0u);
  });
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

TEST_F(UpstreamPoolTest, AWaitEndsAtTheQueueTimeout) {
  UpstreamPool pool(ioc_, conns_, Options(1, 1), stale_);
  Run([&]() -> net::awaitable<void> {
    bool busy = false;
    auto held = co_await Acquire(pool, &busy);
    const auto start = Clock::now();
    bool timed_out = false;
    EXPECT_EQ(co_await Acquire(pool, &timed_out), nullptr);
    EXPECT_TRUE(timed_out);
    EXPECT_GE(Clock::now() - start, milliseconds(200));
    EXPECT_EQ(pool.WaitingApprox(), 0u);
    pool.Release(std::move(held), true);
  });
}

TEST_F(UpstreamPoolTest, AClientIsHeldToItsShare) {
  UpstreamPool pool(ioc_, conns_, Options(4, 4, 1, 1), stale_);
  ClientShares shares;
  Run([&]() -> net::awaitable<void> {
    ClientShares::Claim a, b;
    shares.Begin(a, "10.0.0.1", "");
    shares.Begin(b, "10.0.0.1", "");
    beast::error_code ec;
    bool pooled = false, busy = false;
    auto first = co_await pool.Acquire(ec, &pooled, &busy, a);
    EXPECT_NE(first, nullptr);
    a.Hold();
    // The same client's next request gets none, though the pool has room.
    EXPECT_EQ(co_await pool.Acquire(ec, &pooled, &busy, b), nullptr);
    EXPECT_TRUE(busy);
    a.Unhold();
    pool.Release(std::move(first), true);
  });
}

TEST_F(UpstreamPoolTest, AFailedConnectGivesItsPlaceBack) {
  UpstreamPool::Options options = Options(1, 0);
  {
    // A port nothing listens on: bound, then closed.
    tcp::acceptor closed(ioc_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    options.endpoint.port = std::to_string(closed.local_endpoint().port());
  }
  UpstreamPool pool(ioc_, conns_, options, stale_);
  Run([&]() -> net::awaitable<void> {
    beast::error_code ec;
    auto c = co_await pool.Connect(ec);
    EXPECT_EQ(c, nullptr);
    EXPECT_TRUE(ec);
    EXPECT_EQ(pool.OpenApprox(), 0u);
  });
}

}  // namespace
}  // namespace tollgate::http
