// Tunnel (src/http/tunnel.cpp): an upgraded connection's relay between two real TCP connections
// on 127.0.0.1 of the test's own loop: bytes both ways, a half-close passed on, the idle
// timeout, and the drain's close.
#include "http/tunnel.hpp"

#include <string>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <gtest/gtest.h>

namespace tollgate::http {
namespace {

class TunnelTest : public ::testing::Test {
 protected:
  TunnelTest() {
    Pair(client_peer_, client_);
    Pair(upstream_, upstream_peer_);
  }

  // A connected pair: `a` and the accepted `b`.
  void Pair(tcp::socket& a, Conn& b) {
    tcp::acceptor acceptor(ioc_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    a.connect(acceptor.local_endpoint());
    acceptor.accept(b.socket);
    b.socket.non_blocking(true);
  }
  void Pair(Conn& a, tcp::socket& b) {
    tcp::acceptor acceptor(ioc_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    a.socket.connect(acceptor.local_endpoint());
    a.socket.non_blocking(true);
    acceptor.accept(b);
  }

  // Runs the tunnel and `peers` (the two outer ends' part) on the loop until both end.
  template <class Peers>
  Tunnel::End Run(milliseconds idle, Peers peers) {
    Tunnel::End end{};
    int done = 0;
    net::co_spawn(
        ioc_,
        [&]() -> net::awaitable<void> {
          Tunnel tunnel(tunnels_, client_, client_buffer_, upstream_, upstream_buffer_, idle,
                        {to_upstream_, to_client_});
          end = co_await tunnel.Run();
          ++done;
        },
        net::detached);
    net::co_spawn(
        ioc_,
        [&]() -> net::awaitable<void> {
          co_await peers();
          ++done;
        },
        net::detached);
    // The sweep of deadlines, as the worker's.
    net::steady_timer sweep(ioc_);
    std::function<void()> tick = [&] {
      sweep.expires_after(milliseconds(5));
      sweep.async_wait([&](beast::error_code ec) {
        if (ec || done == 2) return;
        Conn::Sweep(list_, Clock::now());
        tick();
      });
    };
    tick();
    ioc_.run_for(std::chrono::seconds(10));
    EXPECT_EQ(done, 2);
    return end;
  }

  static net::awaitable<std::string> ReadN(tcp::socket& s, size_t n) {
    std::string out(n, '\0');
    auto [ec, got] = co_await net::async_read(s, net::buffer(out), kTuple);
    out.resize(got);
    co_return out;
  }
  static net::awaitable<bool> AtEnd(tcp::socket& s) {
    char c;
    auto [ec, n] = co_await s.async_read_some(net::buffer(&c, 1), kTuple);
    co_return ec == net::error::eof;
  }
  static net::awaitable<void> Send(tcp::socket& s, std::string data) {
    co_await net::async_write(s, net::buffer(data), kTuple);
  }

  net::io_context ioc_;
  ConnList list_;
  Tunnels tunnels_;
  tcp::socket client_peer_{ioc_}, upstream_peer_{ioc_};
  Conn client_{list_, ioc_}, upstream_{list_, ioc_};
  beast::flat_buffer client_buffer_, upstream_buffer_;
  std::atomic<uint64_t> to_upstream_{0}, to_client_{0};
};

TEST_F(TunnelTest, RelaysBothWaysWhatWasReadFirstTooAndPassesOnHalfCloses) {
  // Bytes each side sent right after the heads, already read.
  net::buffer_copy(client_buffer_.prepare(5), net::buffer("early", 5));
  client_buffer_.commit(5);
  net::buffer_copy(upstream_buffer_.prepare(3), net::buffer("hi!", 3));
  upstream_buffer_.commit(3);
  const std::string big(200'000, 'x');
  std::string at_upstream, at_client;
  bool client_saw_end = false, upstream_saw_end = false;
  const Tunnel::End end = Run(milliseconds(5000), [&]() -> net::awaitable<void> {
    at_upstream = co_await ReadN(upstream_peer_, 5);
    at_client = co_await ReadN(client_peer_, 3);
    co_await Send(client_peer_, big);
    at_upstream += co_await ReadN(upstream_peer_, big.size());
    co_await Send(upstream_peer_, "reply");
    at_client += co_await ReadN(client_peer_, 5);
    client_peer_.shutdown(tcp::socket::shutdown_send);  // the client half-closes
    upstream_saw_end = co_await AtEnd(upstream_peer_);
    co_await Send(upstream_peer_, "after");  // the other way still flows
    at_client += co_await ReadN(client_peer_, 5);
    upstream_peer_.shutdown(tcp::socket::shutdown_send);
    client_saw_end = co_await AtEnd(client_peer_);
  });
  EXPECT_EQ(end, Tunnel::End::kClient);
  EXPECT_EQ(at_upstream, "early" + big);
  EXPECT_EQ(at_client, "hi!replyafter");
  EXPECT_TRUE(upstream_saw_end);
  EXPECT_TRUE(client_saw_end);
  EXPECT_EQ(to_upstream_.load(), 5 + big.size());
  EXPECT_EQ(to_client_.load(), 13u);
  EXPECT_EQ(tunnels_.CountApprox(), 0u);
}

TEST_F(TunnelTest, AQuietTunnelEndsAtItsIdleTimeoutAndTrafficKeepsItOpen) {
  const auto start = Clock::now();
  const Tunnel::End end = Run(milliseconds(150), [&]() -> net::awaitable<void> {
    net::steady_timer t(ioc_);
    for (int i = 0; i < 4; ++i) {  // 400 ms of traffic, one byte every 100 ms
      t.expires_after(milliseconds(100));
      co_await t.async_wait(kTuple);
      co_await Send(client_peer_, "x");
      (void)co_await ReadN(upstream_peer_, 1);
    }
  });
  EXPECT_EQ(end, Tunnel::End::kIdleTimeout);
  EXPECT_GE(Clock::now() - start, milliseconds(500));
}

TEST_F(TunnelTest, CloseAllEndsEveryTunnelAsTheDrain) {
  const Tunnel::End end = Run(milliseconds(5000), [&]() -> net::awaitable<void> {
    co_await Send(client_peer_, "x");
    (void)co_await ReadN(upstream_peer_, 1);
    EXPECT_EQ(tunnels_.CountApprox(), 1u);
    tunnels_.CloseAll();
    co_return;
  });
  EXPECT_EQ(end, Tunnel::End::kDrain);
}

TEST_F(TunnelTest, AResetEndsTheTunnelAtOnce) {
  const Tunnel::End end = Run(milliseconds(5000), [&]() -> net::awaitable<void> {
    upstream_peer_.set_option(net::socket_base::linger(true, 0));
    upstream_peer_.close();  // a reset
    co_return;
  });
  EXPECT_EQ(end, Tunnel::End::kUpstream);
}

}  // namespace
}  // namespace tollgate::http
