// Smoothing (`on_limit: delay`): a request its limits admit later than now is held on its
// worker's event loop (a timer; no thread) until its slot, then served. The bounds of held
// requests (server.max_held_requests, server.max_held_per_identity) are reserved before the
// decision, so they are exact: a request that would break them is decided without delay, and
// its limit rejects it with nothing consumed.
#include <boost/asio/steady_timer.hpp>

#include "conn.hpp"
#include "worker.hpp"

namespace tollgate::http {

void Worker::ReserveHold(Exchange& ex) {
  const std::span<store::Check> checks{ex.checks.data(), ex.n_checks};
  const bool smooths = std::any_of(checks.begin(), checks.end(), [](const store::Check& c) {
    const auto* b = std::get_if<core::TokenBucket>(&c.limit->impl());
    return c.enforced && b && b->smooths();
  });
  if (!smooths) return;
  ex.held = gw.held.Reserve(ex.scopes.primary);
  if (ex.held) return;
  gw.held_refused.fetch_add(1, std::memory_order_relaxed);
  for (store::Check& c : checks) c.may_delay = false;
}

net::awaitable<void> Worker::Hold(Exchange& ex) {
  const core::Duration delay = ex.verdict.allowed() ? ex.verdict.delay : core::Duration();
  if (delay.micros() > 0) {
    // The slot is spent whether or not the client waits for it: later requests were scheduled
    // behind it, so it cannot be given back exactly (docs/configuration.md, smoothing).
    gw.holding.fetch_add(1, std::memory_order_relaxed);
    gw.delay_seconds.Observe(static_cast<double>(delay.micros()) / 1e6);
    net::steady_timer timer(ioc, std::chrono::microseconds(delay.micros()));
    co_await timer.async_wait(kTuple);
    gw.holding.fetch_sub(1, std::memory_order_relaxed);
  }
  gw.held.Release(ex.scopes.primary);
  ex.held = false;
}

}  // namespace tollgate::http
