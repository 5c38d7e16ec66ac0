// Active health checks of an upstream group (issue 33, `active_health`): GET its path on each
// endpoint every interval, on a new connection each time, the verdicts to the group's balancer.
#pragma once

#include <boost/asio/awaitable.hpp>

#include "access_log.hpp"
#include "upstream_groups.hpp"
#include "upstream_pool.hpp"

namespace tollgate::http {

// Checks endpoint `i` of `group` for as long as the pool's event loop runs: connects through
// `pool` (its connect timeout and TLS), asks within active_health.timeout_ms, and logs each
// change of verdict. REQUIRES: group.config.active.enabled().
net::awaitable<void> CheckHealth(UpstreamPool& pool, UpstreamGroup& group, size_t i, Log& log);

}  // namespace tollgate::http
