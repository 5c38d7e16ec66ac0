#include "health_check.hpp"

#include <algorithm>

#include <boost/asio/this_coro.hpp>
#include <boost/beast/http.hpp>

#include <tollgate/util/json_escape.hpp>

#include "relay.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace tollgate::http {

namespace bhttp = boost::beast::http;

namespace {

bool Healthy(const config::ActiveHealthConfig& a, unsigned status) {
  if (a.healthy_statuses.empty()) return status >= 200 && status <= 299;
  return std::find(a.healthy_statuses.begin(), a.healthy_statuses.end(),
                   static_cast<int>(status)) != a.healthy_statuses.end();
}

// One check: true when the endpoint answered a healthy status in time.
net::awaitable<bool> CheckOnce(UpstreamPool& pool, const GroupEndpoint& e,
                               const config::ActiveHealthConfig& a) {
  beast::error_code ec;
  std::unique_ptr<UpstreamConnection> c = co_await pool.Connect(ec);
  if (!c) co_return false;
  const std::string request = "GET " + e.target.base_path + a.path +
                              " HTTP/1.1\r\nHost: " + e.target.authority +
                              "\r\nUser-Agent: tollgate-health-check\r\nConnection: close\r\n\r\n";
  const milliseconds timeout(a.timeout_ms);
  ec = co_await WriteAll(c->conn, net::buffer(request), timeout);
  bhttp::response_parser<bhttp::empty_body> p;
  p.skip(true);  // the status line and header are the verdict
  if (!ec) {
    c->conn.ExpiresAfter(timeout);
    auto [rec, n] = co_await bhttp::async_read_header(c->conn.socket, c->buffer, p, kTuple);
    ec = c->conn.Check(rec);
  }
  const bool healthy = !ec && Healthy(a, p.get().result_int());
  pool.Release(std::move(c), false);
  co_return healthy;
}

}  // namespace

net::awaitable<void> CheckHealth(UpstreamPool& pool, UpstreamGroup& group, size_t i, Log& log) {
  const config::ActiveHealthConfig& a = group.config.active;
  net::steady_timer timer(co_await net::this_coro::executor);
  for (;;) {
    const bool healthy = co_await CheckOnce(pool, group.endpoints[i], a);
    const bool was = group.balancer.Read(i, BalancerNow()).check_healthy;
    (void)group.balancer.ReportCheck(i, healthy, a.unhealthy_threshold, a.healthy_threshold);
    if (group.balancer.Read(i, BalancerNow()).check_healthy != was) {
      log.Error(std::string("{\"level\":\"warn\",\"msg\":\"upstream endpoint ") +
                (was ? "failed its health checks" : "passed its health checks") +
                "\",\"group\":\"" + util::JsonEscape(group.config.name) + "\",\"endpoint\":\"" +
                util::JsonEscape(group.endpoints[i].config.url) + "\"}");
    }
    timer.expires_after(milliseconds(a.interval_ms));
    auto [ec] = co_await timer.async_wait(kTuple);
    if (ec) co_return;
  }
}

}  // namespace tollgate::http
