#include <tollgate/metrics/metrics.hpp>

#include <cstdio>

namespace tollgate::metrics {
namespace {

// Every metric family tollgate exports, declared once.
struct Family {
  const char* name;
  const char* type;
  const char* help;
};
constexpr Family kFamilies[] = {
    {"tollgate_requests_total", "counter", "Requests answered, by status class."},
    {"tollgate_decisions_total", "counter",
     "Limiter decisions per check, by plan, check and result (allowed, rejected, "
     "shadow_rejected)."},
    {"tollgate_rejections_total", "counter", "Requests rejected with 429, by plan and code."},
    {"tollgate_requests_by_mode_total", "counter",
     "Requests decided, by plan and mode: enforce, or shadow (a key's own mode, its plan's "
     "cohort, or its plan's mode)."},
    {"tollgate_shadow_rejections_total", "counter",
     "Requests a shadow-mode limit would have rejected, by plan."},
    {"tollgate_degraded_total", "counter",
     "Requests decided without the store because it failed: allowed (fail_mode open) or decided "
     "on this replica's share of each limit (fail_mode local)."},
    {"tollgate_local_decisions_total", "counter",
     "Requests decided on this replica's share of each limit while the store failed "
     "(fail_mode: local), by result (allowed, rejected)."},
    {"tollgate_limiter_unavailable_total", "counter",
     "Requests answered 503 because the store failed (fail-closed)."},
    {"tollgate_invalid_keys_total", "counter", "Requests with a missing or unknown API key."},
    {"tollgate_blocked_total", "counter",
     "Requests refused with 403 blocked: a key, account or address on the deny list."},
    {"tollgate_upstream_errors_total", "counter",
     "Upstream failures, by kind (connect, timeout, protocol)."},
    {"tollgate_config_reloads_total", "counter", "Configuration reloads, by result (ok, error)."},
    {"tollgate_bad_requests_total", "counter",
     "Requests refused with 400 before any decision, by code (invalid_request_target, "
     "invalid_host, invalid_transfer_encoding)."},
    {"tollgate_admin_refused_total", "counter",
     "Admin listener requests refused, by reason: host (421, a Host not on its allow-list) or "
     "token (401, a change without server.admin_token)."},
    {"tollgate_upstream_busy_total", "counter",
     "Requests answered 503 upstream_busy: every upstream connection busy, the queue full or the "
     "wait too long."},
    {"tollgate_upstream_stale_total", "counter",
     "Pooled upstream connections closed unused: readable (bytes or EOF) while idle."},
    {"tollgate_tls_handshakes_total", "counter",
     "TLS handshakes on a listener, by listener and result (ok, failed, timeout)."},
    {"tollgate_upstream_retries_total", "counter",
     "Requests sent again on a new upstream connection (idempotent, or nothing written), to "
     "another endpoint of the group when one is admitted."},
    {"tollgate_upstream_no_healthy_total", "counter",
     "Requests answered 503 no_healthy_upstream: every endpoint of their group was out."},
    {"tollgate_accept_errors_total", "counter",
     "Failed accepts (EMFILE, ENFILE, ENOBUFS, ...); each backs off before the next."},
    {"tollgate_connections_refused_total", "counter",
     "Connections closed at accept, by listener and reason (max_connections, per_address)."},
    {"tollgate_decision_untrusted_headers_total", "counter",
     "Decision requests whose X-Original-* / X-Forwarded-* came from a peer not in "
     "identity.trusted_proxies (ignored)."},
    {"tollgate_forwarded_for_unparsed_total", "counter",
     "X-Forwarded-For entries from a trusted proxy that are no address (the walk stopped at "
     "the last address it could read)."},
    {"tollgate_rls_descriptor_hits_total", "counter",
     "Envoy RLS hits (hits_addend) per descriptor path of rls.envoy_config."},
    {"tollgate_rls_descriptor_over_limit_total", "counter",
     "Envoy RLS hits over their descriptor's limit (shadowed ones too)."},
    {"tollgate_rls_descriptor_near_limit_total", "counter",
     "Envoy RLS hits allowed above rls.near_limit_ratio of their descriptor's limit."},
    {"tollgate_rls_descriptor_within_limit_total", "counter",
     "Envoy RLS hits allowed within their descriptor's limit."},
    {"tollgate_rls_descriptor_shadow_mode_total", "counter",
     "Envoy RLS hits over their limit answered OK by shadow_mode."},
    {"tollgate_limiter_latency_seconds", "histogram", "Time to decide one request."},
    {"tollgate_delay_seconds", "histogram",
     "Delays of the requests held by smoothing (on_limit: delay) before they were served."},
    {"tollgate_held_refused_total", "counter",
     "Requests decided without delay because server.max_held_requests or "
     "server.max_held_per_identity was reached (a 429 where they would have been held)."},
    {"tollgate_upstream_latency_seconds", "histogram",
     "Time from forwarding to the upstream's response headers."},
    {"tollgate_upgrades_total", "counter",
     "Upgrade requests (server.upgrades) by result: switched, invalid (400 invalid_upgrade), "
     "too_many (429 too_many_upgrades), capacity (503 upgrade_capacity), upstream_invalid (502 "
     "upstream_invalid_upgrade), not_switched (answered otherwise: a 429 of a limit, the "
     "upstream's refusal or failure)."},
    {"tollgate_upgraded_bytes_total", "counter",
     "Bytes relayed through upgraded connections, by direction (to_upstream, to_client)."},
    {"tollgate_http2_connections_total", "counter",
     "HTTP/2 connections of the gateway listener, by protocol (h2 by ALPN, h2c by prior "
     "knowledge)."},
    {"tollgate_http2_streams_total", "counter", "HTTP/2 streams (requests) opened by clients."},
    {"tollgate_http2_resets_received_total", "counter", "RST_STREAM frames from clients."},
    {"tollgate_http2_floods_total", "counter",
     "HTTP/2 connections ended (GOAWAY ENHANCE_YOUR_CALM) for a flood, by kind: resets (rapid "
     "reset), control_frames (SETTINGS, PING, PRIORITY, WINDOW_UPDATE, empty DATA), headers (a "
     "header block past 4x server.max_header_bytes)."},
    {"tollgate_http2_malformed_total", "counter",
     "HTTP/2 requests reset as malformed (RFC 9113 8.1.1) before they reached the exchange."},
    {"tollgate_http2_refused_streams_total", "counter",
     "HTTP/2 streams refused (RST_STREAM REFUSED_STREAM): no room in server.max_connections or "
     "max_connections_per_address for their lane."},
    {"tollgate_http2_goaways_sent_total", "counter", "GOAWAY frames sent, by error code."},
    {"tollgate_upgraded_closed_total", "counter",
     "Upgraded connections closed, by reason: client, upstream (the side that closed first), "
     "idle_timeout (server.upgrade_idle_timeout_ms), drain (SIGTERM's drain ended)."},
};

}  // namespace

void Histogram::Observe(double seconds) {
  size_t i = 0;
  while (i < kBuckets.size() && seconds > kBuckets[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

void Histogram::Render(std::string_view name, std::string& out) const {
  uint64_t cumulative = 0;
  char buf[128];
  for (size_t i = 0; i <= kBuckets.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    if (i < kBuckets.size()) {
      std::snprintf(buf, sizeof buf, "_bucket{le=\"%g\"} %llu\n", kBuckets[i],
                    static_cast<unsigned long long>(cumulative));
    } else {
      std::snprintf(buf, sizeof buf, "_bucket{le=\"+Inf\"} %llu\n",
                    static_cast<unsigned long long>(cumulative));
    }
    out.append(name).append(buf);
  }
  std::snprintf(buf, sizeof buf, "_sum %.9f\n", sum_ns_.load(std::memory_order_relaxed) / 1e9);
  out.append(name).append(buf);
  std::snprintf(buf, sizeof buf, "_count %llu\n", static_cast<unsigned long long>(cumulative));
  out.append(name).append(buf);
}

std::atomic<uint64_t>& Registry::Counter(std::string_view name, std::string_view labels) {
  std::string key(name);
  key += '\0';
  key += labels;
  std::lock_guard lock(mu_);
  auto& slot = counters_[key];
  if (!slot) slot = std::make_unique<std::atomic<uint64_t>>(0);
  return *slot;
}

Histogram& Registry::Hist(std::string_view name) {
  std::lock_guard lock(mu_);
  auto& slot = histograms_[std::string(name)];
  if (!slot) slot = std::make_unique<Histogram>();
  return *slot;
}

void Registry::AddRead(std::string_view name, std::string_view labels, const char* type,
                       std::string_view help, std::function<double()> read) {
  std::string key(name);
  key += '\0';
  key += labels;
  std::lock_guard lock(mu_);
  reads_[std::move(key)] = {type, std::string(help), std::move(read)};
}

void Registry::CounterFrom(std::string_view name, std::string_view help,
                           std::function<double()> read, std::string_view labels) {
  AddRead(name, labels, "counter", help, std::move(read));
}

void Registry::Gauge(std::string_view name, std::string_view help, std::function<double()> read,
                     std::string_view labels) {
  AddRead(name, labels, "gauge", help, std::move(read));
}

std::string Label(std::string_view name, std::string_view value) {
  std::string out(name);
  out += "=\"";
  for (const char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

std::optional<std::string> LabelValue(std::string_view labels, std::string_view name) {
  size_t i = 0;
  while (i < labels.size()) {
    const size_t eq = labels.find("=\"", i);
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string_view label = labels.substr(i, eq - i);
    std::string value;
    size_t j = eq + 2;
    for (; j < labels.size() && labels[j] != '"'; ++j) {
      if (labels[j] == '\\' && j + 1 < labels.size()) {
        ++j;
        value += labels[j] == 'n' ? '\n' : labels[j];
      } else {
        value += labels[j];
      }
    }
    if (label == name) return value;
    i = j + 1;  // past the closing quote
    if (i < labels.size() && labels[i] == ',') ++i;
  }
  return std::nullopt;
}

std::vector<Registry::Sample> Registry::Samples(std::string_view name) const {
  std::vector<Sample> out;
  std::string prefix(name);
  prefix += '\0';
  std::lock_guard lock(mu_);
  for (auto it = counters_.lower_bound(prefix);
       it != counters_.end() && std::string_view(it->first).starts_with(prefix); ++it) {
    out.push_back({it->first.substr(prefix.size()), it->second->load(std::memory_order_relaxed)});
  }
  return out;
}

std::string Registry::Render() const {
  std::lock_guard lock(mu_);
  std::string out;
  // Families always appear, at zero when nothing happened yet: absence is not silence.
  for (const Family& f : kFamilies) {
    out.append("# HELP ").append(f.name).append(" ").append(f.help).append("\n");
    out.append("# TYPE ").append(f.name).append(" ").append(f.type).append("\n");
    if (std::string_view(f.type) == "histogram") {
      auto it = histograms_.find(f.name);
      if (it != histograms_.end()) it->second->Render(f.name, out);
      continue;
    }
    bool any = false;
    for (const auto& [key, value] : counters_) {
      const size_t nul = key.find('\0');
      if (std::string_view(key).substr(0, nul) != f.name) continue;
      any = true;
      out.append(f.name);
      const std::string_view labels = std::string_view(key).substr(nul + 1);
      if (!labels.empty()) out.append("{").append(labels).append("}");
      out.append(" ").append(std::to_string(value->load(std::memory_order_relaxed))).append("\n");
    }
    if (!any) out.append(f.name).append(" 0\n");
  }
  std::string_view last;
  for (const auto& [key, r] : reads_) {
    const size_t nul = key.find('\0');
    const std::string_view name = std::string_view(key).substr(0, nul);
    const std::string_view labels = std::string_view(key).substr(nul + 1);
    if (name != last) {
      out.append("# HELP ").append(name).append(" ").append(r.help).append("\n");
      out.append("# TYPE ").append(name).append(" ").append(r.type).append("\n");
      last = name;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, " %.17g\n", r.read());
    out.append(name);
    if (!labels.empty()) out.append("{").append(labels).append("}");
    out.append(buf);
  }
  return out;
}

}  // namespace tollgate::metrics
