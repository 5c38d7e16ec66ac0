// The gateway's upstream groups (issue 33): per group its settings, its endpoints (where each
// is, its TLS) and the balancer they share; built once at start (changing them needs a
// restart). The `upstream:` section is the group "default" of one endpoint. Each worker keeps
// one pool per endpoint (Worker::pools), at UpstreamGroup::first_pool + the endpoint's index.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <tollgate/config/config.hpp>
#include <tollgate/metrics/metrics.hpp>

#include "upstream_balancer.hpp"
#include "upstream_pool.hpp"
#include "upstream_tls.hpp"

namespace tollgate::http {

struct UpstreamTarget {
  Endpoint endpoint;
  std::string authority;  // host[:port] as the url writes it: the Host of requests without one
  std::string base_path;  // prefixed to every forwarded target; empty or "/api"
};
// The target of an http:// or https:// url (the loader checked its shape); throws naming
// `what` when it has no usable host:port.
UpstreamTarget ParseUpstreamUrl(const std::string& url, const char* what);

struct GroupEndpoint {
  config::UpstreamConfig config;  // its url and the group's settings
  UpstreamTarget target;
  std::unique_ptr<UpstreamTls> tls;  // an https:// endpoint's; null: plaintext
  std::string labels;                // group="...",endpoint="..." (the url)
};

// Thread-safe once built: the balancer is, the rest is immutable.
struct UpstreamGroup {
  config::UpstreamGroupConfig config;
  std::vector<GroupEndpoint> endpoints;
  Balancer balancer;
  size_t first_pool = 0;
  std::atomic<uint64_t>* no_healthy = nullptr;  // tollgate_upstream_no_healthy_total{group}

  UpstreamGroup(config::UpstreamGroupConfig c, size_t first)
      : config(std::move(c)),
        balancer(config.balance, config.passive, config.endpoints.size()),
        first_pool(first) {}
  const config::UpstreamConfig& settings() const { return endpoints.front().config; }
};

// Every group of `config` (the default first), their TLS contexts made (a warning through
// `warn` for each that verifies nothing) and their metrics declared in `metrics`: each
// endpoint's state, ejections, requests and outstanding requests. Throws naming the field of a
// TLS setting that cannot be used.
std::vector<std::unique_ptr<UpstreamGroup>> BuildUpstreamGroups(
    const config::Config& config, metrics::Registry& metrics,
    const std::function<void(const std::string&)>& warn);

// Monotonic milliseconds, as the balancer takes them.
int64_t BalancerNow();

}  // namespace tollgate::http
