// The gateway's process-wide state (Gateway::Impl) and the small types its rooms share. The
// rooms: worker.hpp (a worker thread, a request's state), gateway.cpp (wiring, reload, drain),
// admin.cpp, explain.cpp, admin_ui.cpp (the admin listener's actions).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http.hpp>

#include <tollgate/contract/contract.hpp>
#include <tollgate/engine/checks.hpp>
#include <tollgate/engine/engine.hpp>
#include <tollgate/http/admin_guard.hpp>
#include <tollgate/http/gateway.hpp>
#include <tollgate/http/request_head.hpp>
#include <tollgate/metrics/metrics.hpp>
#include <tollgate/policy/key_source.hpp>
#include <tollgate/policy/policy.hpp>
#include <tollgate/policy/policy_holder.hpp>
#include <tollgate/store/chores.hpp>
#include <tollgate/usage/meter.hpp>
#include <tollgate/usage/usage.hpp>
#include <tollgate/util/hash.hpp>
#include <tollgate/util/json_escape.hpp>
#include <tollgate/util/target.hpp>

#include "access_log.hpp"
#include "conn.hpp"
#include "connection_budget.hpp"
#include "identity_budget.hpp"
#include "listener_tls.hpp"
#include "live_page.hpp"
#include "top.hpp"
#include "upstream_groups.hpp"
#include "upstream_head.hpp"
#include "upstream_pool.hpp"

namespace tollgate::http {

using contract::AppendRateLimitHeaders;
using contract::AppendRejectionBody;
using contract::HeaderList;
using contract::ProblemBody;
using contract::RejectionBody;
using util::AppendJsonEscaped;
using util::CanonicalizeTarget;
using util::CanonicalTarget;
using util::JsonEscape;

namespace bhttp = boost::beast::http;
using engine::kMaxChecks;
using util::AppendDecimal;

// What a connection was accepted on.
enum class Listener {
  kGateway,   // the reverse proxy
  kAdmin,     // reload, key lookup, usage export; loopback by default
  kDecision,  // the decision service for nginx auth_request, Traefik ForwardAuth, ext_authz
};

// One more in `count` while it lives.
class Counted {
 public:
  explicit Counted(std::atomic<size_t>& count) : count_(count) { count_.fetch_add(1); }
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;
  ~Counted() { count_.fetch_sub(1); }

 private:
  std::atomic<size_t>& count_;
};

// One less in `count` while it lives: an upgraded connection is not a request in flight (the
// drain does not wait for it; it is closed at the drain's end).
class Uncounted {
 public:
  explicit Uncounted(std::atomic<size_t>& count) : count_(count) { count_.fetch_sub(1); }
  Uncounted(const Uncounted&) = delete;
  Uncounted& operator=(const Uncounted&) = delete;
  ~Uncounted() { count_.fetch_add(1); }

 private:
  std::atomic<size_t>& count_;
};

// After an accept failed for want of descriptors or memory.
constexpr milliseconds kAcceptBackoff{50};

class Worker;

// A request's fields come from an arena of its connection, emptied between requests: Beast's
// fields otherwise cost a malloc and a free per field.
using RequestAllocator = std::pmr::polymorphic_allocator<char>;
using RequestParser = bhttp::request_parser<bhttp::buffer_body, RequestAllocator>;

struct Scratch;  // a connection's buffers, below
class Exchange;  // a request's state from one step to the next, below
// What is left to do for a request after one step of it.
enum class Step {
  kReply,       // send scratch.out, a response of ours
  kDecide,      // decide ex.request, then Conclude()
  kAdminUsage,  // GET /admin/usage
  kKeyUsage,    // GET /v1/usage
  kAdminHook,   // POST to an endpoint of Gateway::AddAdminEndpoint
  kForward,     // to the upstream
};

struct Gateway::Impl {
  Impl(std::string path, config::Config config, std::string_view config_text,
       GatewayServices services);

  std::string config_path;
  const config::ServerConfig server;  // not reloadable: needs a restart
  const AdminGuard admin_guard{server.admin_listen, server.admin_hosts, server.admin_token};
  // The upstream groups (issue 33; the default first), built at start: not reloadable.
  std::vector<std::unique_ptr<UpstreamGroup>> groups;

  // Handed in (GatewayServices::policy): the policy in force and its generation.
  policy::PolicyHolder& policies;
  const std::atomic<uint64_t>& generation = policies.generation();

  const config::DecisionConfig decision;
  metrics::Registry& metrics;  // handed in (GatewayServices::metrics); counters bound below
  metrics::Histogram& limiter_latency = metrics.Hist("tollgate_limiter_latency_seconds");
  metrics::Histogram& upstream_latency = metrics.Hist("tollgate_upstream_latency_seconds");
  std::atomic<uint64_t>& invalid_keys = metrics.Counter("tollgate_invalid_keys_total");
  Log log;

  // Handed in (GatewayServices): they outlive the gateway.
  engine::Engine* const engine;
  store::Chores& store;
  store::Replicas* const replicas;  // null: no other replica shares the store
  usage::UsageMeter* const meter;
  // Keys from PostgreSQL (keys.source: postgres); the policy is rebuilt when they change.
  std::unique_ptr<policy::KeySource> key_source;
  config::Config file_config;  // the configuration file as last loaded (keys from it or PG)
  std::atomic<int64_t> last_store_log_s{0};
  // tollgate_requests_total by class (2xx, 3xx, 4xx, 5xx), resolved once.
  std::array<std::atomic<uint64_t>*, 4> requests_by_class{};

  // Builds the policy from `config` with `keys` and swaps it in (policies.Install(), keys of
  // unknown plans logged); the old one keeps serving on error. REQUIRES: reload_mu held.
  core::Result<bool> Install(config::Config config);
  std::mutex reload_mu;
  // Store failures are logged at most once a second (every one is counted).
  void LogStoreFailure(store::StoreErrc errc);

  // Client connections: the gateway and decision listeners' (server.max_connections,
  // server.max_connections_per_address), and the admin listener's own budget.
  ConnectionBudget connections{server.max_connections, server.max_connections_per_address};
  ConnectionBudget admin_connections{server.admin_max_connections, 0};
  std::atomic<uint64_t>& upstream_busy = metrics.Counter("tollgate_upstream_busy_total");
  std::atomic<uint64_t>& upstream_stale = metrics.Counter("tollgate_upstream_stale_total");
  std::atomic<uint64_t>& upstream_retries = metrics.Counter("tollgate_upstream_retries_total");
  std::atomic<uint64_t>& accept_errors = metrics.Counter("tollgate_accept_errors_total");
  std::atomic<uint64_t>& untrusted_headers =
      metrics.Counter("tollgate_decision_untrusted_headers_total");
  // X-Forwarded-For entries from a trusted proxy that are no address (issue 31).
  std::atomic<uint64_t>& forwarded_for_unparsed =
      metrics.Counter("tollgate_forwarded_for_unparsed_total");
  std::atomic<size_t> in_flight{0};
  std::atomic<bool> draining{false};  // the listeners are closed
  std::atomic<bool> stopping{false};  // SIGTERM or SIGINT arrived: /readyz answers 503
  // The memory store, always; Redis: its last PING was answered (CheckStore(), every second).
  std::atomic<bool> store_ready{false};
  void CloseListeners();
  void CheckStore();
  void Tick();  // every 100 ms on the main thread: usage flushes, the store's PING, the sweep
  int ticks = 0;
  // Why /readyz answers 503 ("stopping", "store_unavailable"), or "" when ready.
  std::string_view Readiness() const;

  // The admin API's deny list (admin.cpp); with Redis in <prefix>:deny, read every second.
  std::mutex deny_mu;
  std::shared_ptr<const policy::DenyList> runtime_deny = std::make_shared<policy::DenyList>();
  std::atomic<bool> has_runtime_deny{false};
  std::atomic<uint64_t>& blocked = metrics.Counter("tollgate_blocked_total");
  // The admin API's list for engine::AdmitRequest::runtime_deny; null while it is empty.
  std::shared_ptr<const policy::DenyList> RuntimeDeny();
  std::optional<core::Error> ChangeDeny(bool add, policy::DenyList::Kind kind, std::string_view v);
  void SetRuntimeDeny(std::shared_ptr<const policy::DenyList> list);
  void SyncDeny();
  void Reset(std::string body, AdminReply reply);     // POST /admin/reset (admin.cpp)
  void Explain(std::string query, AdminReply reply);  // GET /admin/explain (explain.cpp)

  // Keys of a plan that does not exist (issue 31): logged when their number changes.
  void NoteUnknownPlans(size_t keys, const config::KeyConfig& first);

  std::function<void()> on_drain;   // Gateway::OnDrain
  std::function<void()> on_reload;  // Gateway::OnReload
  // "POST /json", "POST /admin/reset", "GET /admin/explain" (a GET's gets its query as body).
  std::map<std::string, AdminHandler, std::less<>> admin_endpoints;
  LivePage live;  // the config version and start time of GET /admin/ui/data (admin_ui.cpp)

  // Smoothing: room for held requests (hold.cpp).
  IdentityBudget held{server.max_held_requests, server.max_held_per_identity};
  std::atomic<size_t> holding{0};  // requests waiting out their delay now
  metrics::Histogram& delay_seconds = metrics.Hist("tollgate_delay_seconds");
  std::atomic<uint64_t>& held_refused = metrics.Counter("tollgate_held_refused_total");

  // Upgraded connections (issue 33, upgrade.cpp): their places, reserved before the decision,
  // and what became of the upgrades asked, relayed and closed.
  IdentityBudget upgraded{server.max_upgraded_connections, server.max_upgraded_per_identity};
  struct UpgradeCounters {
    explicit UpgradeCounters(metrics::Registry& m) : m_(m) {}
    metrics::Registry& m_;
    std::atomic<uint64_t>& Result(const char* r) {
      return m_.Counter("tollgate_upgrades_total", std::string("result=\"") + r + "\"");
    }
    std::atomic<uint64_t>& Closed(const char* r) {
      return m_.Counter("tollgate_upgraded_closed_total", std::string("reason=\"") + r + "\"");
    }
    std::atomic<uint64_t>& switched = Result("switched");
    std::atomic<uint64_t>& invalid = Result("invalid");
    std::atomic<uint64_t>& too_many = Result("too_many");
    std::atomic<uint64_t>& capacity = Result("capacity");
    std::atomic<uint64_t>& upstream_invalid = Result("upstream_invalid");
    std::atomic<uint64_t>& not_switched = Result("not_switched");
    std::atomic<uint64_t>& to_upstream =
        m_.Counter("tollgate_upgraded_bytes_total", "direction=\"to_upstream\"");
    std::atomic<uint64_t>& to_client =
        m_.Counter("tollgate_upgraded_bytes_total", "direction=\"to_client\"");
    std::array<std::atomic<uint64_t>*, 4> closed = {&Closed("client"), &Closed("upstream"),
                                                    &Closed("idle_timeout"), &Closed("drain")};
  } upgrades{metrics};
  // Ends every worker's tunnels (the drain's end); OpenTunnels() counts those still open.
  void CloseTunnels();
  size_t OpenTunnels() const;
  // Whether the drain is over, asked by the main thread every tick while it drains: no request
  // in flight (or `drain_deadline` passed), then the tunnels closed and gone (or given a moment).
  bool DrainEnded(Clock::time_point drain_deadline);
  bool tunnels_closing = false;  // main thread only
  Clock::time_point tunnels_deadline;

  std::vector<std::unique_ptr<Worker>> workers;

  // TLS of the gateway and admin listeners (server.tls, server.admin_tls); null: plaintext.
  std::unique_ptr<ListenerTls> gateway_tls, admin_tls;
  ListenerTls* TlsOf(Listener l) const {
    return l == Listener::kGateway ? gateway_tls.get()
           : l == Listener::kAdmin ? admin_tls.get()
                                   : nullptr;
  }
  // Reads every TLS listener's certificates again (`why`: what asked), each refusal logged and
  // counted (ListenerTls::Reload()).
  void ReloadTls(std::string_view why);

  // The constructor's steps: the key source (REQUIRES: reload_mu held) and its first keys; the
  // gauges of what the gateway counts.
  std::vector<config::KeyConfig> StartKeySource(
      const decltype(GatewayServices::start_keys)& start_keys);
  void RegisterMetrics();

  // Reload: a bad configuration is refused and the old one keeps serving.
  core::Result<bool> Reload();
  ~Impl();
  std::shared_ptr<const policy::Policy> CurrentPolicy() { return policies.Current(); }
};

}  // namespace tollgate::http
