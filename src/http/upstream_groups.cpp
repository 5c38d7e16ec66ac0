#include "upstream_groups.hpp"

#include <chrono>
#include <stdexcept>

#include <tollgate/util/host_port.hpp>
#include <tollgate/util/json_escape.hpp>

namespace tollgate::http {

UpstreamTarget ParseUpstreamUrl(const std::string& url, const char* what) {
  const bool https = url.rfind("https://", 0) == 0;
  std::string rest = url.substr(https ? 8 : 7);  // after the scheme
  const size_t slash = rest.find('/');
  UpstreamTarget t;
  if (slash != std::string::npos) {
    t.base_path = rest.substr(slash);
    if (t.base_path == "/") t.base_path.clear();
    rest = rest.substr(0, slash);
  }
  t.authority = rest;
  if (rest.find(':') == std::string::npos) rest += https ? ":443" : ":80";
  auto hp = util::SplitHostPort(rest);
  if (!hp) throw std::runtime_error(std::string(what) + ": expected host:port, got '" + rest + "'");
  t.endpoint = {std::move(hp->host), std::move(hp->port)};
  return t;
}

int64_t BalancerNow() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
             .count() +
         1;  // never 0, which the balancer reads as "never"
}

namespace {

void DeclareMetrics(UpstreamGroup& g, metrics::Registry& metrics) {
  g.no_healthy = &metrics.Counter("tollgate_upstream_no_healthy_total",
                                  metrics::Label("group", g.config.name));
  for (size_t i = 0; i < g.endpoints.size(); ++i) {
    const std::string& labels = g.endpoints[i].labels;
    const Balancer& b = g.balancer;
    metrics.Gauge(
        "tollgate_upstream_endpoint_state",
        "1 while the endpoint is admitted, 0 while ejected (passive or active health).",
        [&b, i] { return b.Read(i, BalancerNow()).admitted ? 1.0 : 0.0; }, labels);
    metrics.Gauge(
        "tollgate_upstream_endpoint_outstanding", "Requests at the endpoint now, all workers.",
        [&b, i] { return static_cast<double>(b.Read(i, BalancerNow()).outstanding); }, labels);
    metrics.CounterFrom(
        "tollgate_upstream_ejections_total",
        "Times the endpoint was ejected: passive health, or taken out by its health checks.",
        [&b, i] { return static_cast<double>(b.Read(i, BalancerNow()).ejections); }, labels);
    metrics.CounterFrom(
        "tollgate_upstream_endpoint_requests_total", "Tries sent to the endpoint (retries too).",
        [&b, i] { return static_cast<double>(b.Read(i, BalancerNow()).requests); }, labels);
  }
}

}  // namespace

std::vector<std::unique_ptr<UpstreamGroup>> BuildUpstreamGroups(
    const config::Config& config, metrics::Registry& metrics,
    const std::function<void(const std::string&)>& warn) {
  std::vector<std::unique_ptr<UpstreamGroup>> groups;
  size_t pools = 0;
  // A configuration not read by the loader (built in code) has the upstream section alone.
  std::vector<config::UpstreamGroupConfig> only_upstream;
  if (config.upstreams.empty()) {
    only_upstream.push_back({.name = std::string(config::kDefaultUpstream),
                             .endpoints = {config.upstream},
                             .passive = {.consecutive_failures = 0}});
  }
  for (const config::UpstreamGroupConfig& gc :
       config.upstreams.empty() ? only_upstream : config.upstreams) {
    auto g = std::make_unique<UpstreamGroup>(gc, pools);
    pools += gc.endpoints.size();
    // The default group of the `upstream:` section is named by that section in errors.
    const bool section =
        groups.empty() && gc.endpoints.size() == 1 && gc.passive.consecutive_failures == 0;
    const std::string field = section ? "upstream" : "upstreams." + gc.name;
    for (const config::UpstreamConfig& ec : gc.endpoints) {
      GroupEndpoint e{
          .config = ec,
          .target = ParseUpstreamUrl(ec.url, (field + ".url").c_str()),
          .labels = metrics::Label("group", gc.name) + "," + metrics::Label("endpoint", ec.url)};
      if (ec.https()) {
        auto made = UpstreamTls::Create(ec, e.target.endpoint.host);
        if (!made) throw std::runtime_error(field + ".tls: " + made.error());
        e.tls = std::move(made).value();
        if (!ec.tls.verify) {
          warn("{\"level\":\"warning\",\"msg\":\"" + field +
               ".tls.verify is false: the upstream's certificate is not checked\",\"endpoint\":\"" +
               util::JsonEscape(ec.url) + "\"}");
        }
      }
      g->endpoints.push_back(std::move(e));
    }
    DeclareMetrics(*g, metrics);
    groups.push_back(std::move(g));
  }
  return groups;
}

}  // namespace tollgate::http
