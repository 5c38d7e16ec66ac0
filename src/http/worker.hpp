// The gateway's insides, shared by its rooms: the process-wide state (Gateway::Impl), one
// worker thread (Worker: its listeners, connections, upstream pool and caches), and one
// request's state (Exchange) and buffers (Scratch). The rooms: worker.cpp (accepting, the
// connection loop), exchange.cpp (a request's steps: identity, decision, answer),
// forward.cpp (the proxy), upstream_pool.cpp, gateway.cpp (wiring, reload, drain).
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
#include <tollgate/engine/deny_cache.hpp>
#include <tollgate/engine/engine.hpp>
#include <tollgate/http/gateway.hpp>
#include <tollgate/http/request_head.hpp>
#include <tollgate/metrics/metrics.hpp>
#include <tollgate/policy/policy.hpp>
#include <tollgate/policy/postgres_keys.hpp>
#include <tollgate/store/memory_store.hpp>
#include <tollgate/store/redis_store.hpp>
#include <tollgate/usage/meter.hpp>
#include <tollgate/usage/usage.hpp>
#include <tollgate/util/hash.hpp>
#include <tollgate/util/target.hpp>

#include "access_log.hpp"
#include "conn.hpp"
#include "top.hpp"
#include "upstream_head.hpp"

namespace tollgate::http {

using contract::AppendJsonEscaped;
using contract::AppendRateLimitHeaders;
using contract::AppendRejectionBody;
using contract::HeaderList;
using contract::JsonEscape;
using contract::ProblemBody;
using contract::RejectionBody;
using util::CanonicalizeTarget;
using util::CanonicalTarget;

namespace bhttp = boost::beast::http;
using engine::kMaxChecks;
using util::AppendDecimal;

struct Endpoint {
  std::string host;
  std::string port;
};

struct UpstreamTarget {
  Endpoint endpoint;
  std::string authority;  // host[:port] as upstream.url writes it: the Host of requests without one
  std::string base_path;  // prefixed to every forwarded target; empty or "/api"
};

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

// After an accept failed for want of descriptors or memory.
constexpr milliseconds kAcceptBackoff{50};

struct Worker;

// A request's fields come from an arena of its connection, emptied between requests: Beast's
// fields otherwise cost a malloc and a free per field.
using RequestAllocator = std::pmr::polymorphic_allocator<char>;
using RequestParser = bhttp::request_parser<bhttp::buffer_body, RequestAllocator>;

struct Scratch;   // a connection's buffers, below
struct Exchange;  // a request's state from one step to the next, below
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
  Impl(std::string path, config::Config config);

  std::string config_path;
  const config::ServerConfig server;  // not reloadable: needs a restart
  const config::UpstreamConfig upstream_config;
  const UpstreamTarget upstream;

  std::mutex policy_mu;
  std::shared_ptr<const policy::Policy> policy;
  std::atomic<uint64_t> generation{1};

  const config::DecisionConfig decision;
  metrics::Registry metrics;
  metrics::Histogram& limiter_latency = metrics.Hist("tollgate_limiter_latency_seconds");
  metrics::Histogram& upstream_latency = metrics.Hist("tollgate_upstream_latency_seconds");
  std::atomic<uint64_t>& invalid_keys = metrics.Counter("tollgate_invalid_keys_total");
  Log log;

  // The store: memory, or Redis behind the exact deny cache. Destroyed after the engine.
  std::unique_ptr<store::MemoryStore> memory;
  std::unique_ptr<store::RedisStore> redis;
  std::unique_ptr<engine::DenyCache> deny_cache;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<usage::UsageBackend> usage_backend;
  // Usage goes to the backend a tenth of the keys per tick (100 ms), each key once a second:
  // one write per key per second, in ten small batches. One batch a second of every key seen
  // held decisions up behind it on the same Redis (with 10,000 keys, the random-key p99 of the
  // Redis benchmark went from 10 to 25 ms); every key every tick cost Redis a write per key and
  // tick, and the memory backend a merge (with 10,000 keys, the decision service's p99 went
  // from 4 to 5 ms).
  static constexpr size_t kUsageSlices = 10;
  std::unique_ptr<usage::UsageMeter> meter;
  // Keys from PostgreSQL (keys.source: postgres); the policy is rebuilt when they change.
  std::unique_ptr<policy::PostgresKeySource> key_source;
  config::Config file_config;  // the configuration file as last loaded (keys from it or PG)
  std::atomic<int64_t> last_store_log_s{0};
  // tollgate_requests_total by class (2xx, 3xx, 4xx, 5xx), resolved once.
  std::array<std::atomic<uint64_t>*, 4> requests_by_class{};

  // Builds the policy from `config` with `keys` and swaps it in; the old one keeps serving on
  // error. REQUIRES: reload_mu held.
  core::Result<bool> Install(config::Config config);
  std::mutex reload_mu;
  // Store failures are logged at most once a second (every one is counted).
  void LogStoreFailure(store::StoreErrc errc);

  std::atomic<size_t> connections{0};  // gateway and decision listeners (server.max_connections)
  std::atomic<size_t> admin_connections{0};  // the admin listener's own budget
  // Open connections per client address (server.max_connections_per_address).
  struct AddressCounts {
    std::mutex mu;
    absl::flat_hash_map<std::string, size_t> counts;
  } by_address;
  std::atomic<uint64_t>& upstream_busy = metrics.Counter("tollgate_upstream_busy_total");
  std::atomic<uint64_t>& upstream_stale = metrics.Counter("tollgate_upstream_stale_total");
  std::atomic<uint64_t>& upstream_retries = metrics.Counter("tollgate_upstream_retries_total");
  std::atomic<uint64_t>& accept_errors = metrics.Counter("tollgate_accept_errors_total");
  std::atomic<uint64_t>& untrusted_headers =
      metrics.Counter("tollgate_decision_untrusted_headers_total");
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
  bool Denied(const policy::Policy& pol, const policy::Key* key, std::string_view client);
  std::optional<core::Error> ChangeDeny(bool add, policy::DenyList::Kind kind, std::string_view v);
  void SetRuntimeDeny(std::shared_ptr<const policy::DenyList> list);
  void SyncDeny();
  void Reset(std::string body, AdminReply reply);     // POST /admin/reset (admin.cpp)
  void Explain(std::string query, AdminReply reply);  // GET /admin/explain (explain.cpp)
  std::string DenyKey() const { return store_prefix + ":deny"; }
  // Resets count here; a replica that sees it move clears its deny cache.
  std::string ResetEpochKey() const { return store_prefix + ":reset-epoch"; }
  std::string reset_epoch;  // as last read; under deny_mu
  std::string store_prefix;
  std::function<void()> on_drain;   // Gateway::OnDrain
  std::function<void()> on_reload;  // Gateway::OnReload
  // "POST /json", "POST /admin/reset", "GET /admin/explain" (a GET's gets its query as body).
  std::map<std::string, AdminHandler, std::less<>> admin_endpoints;

  // Smoothing: room for held requests, reserved before a decision that may delay (so that the
  // bounds are exact), given back after the hold or at once when there is none.
  struct Held {
    std::mutex mu;
    size_t total = 0;  // reservations
    absl::flat_hash_map<std::string, size_t> by_identity;
  } held;
  std::atomic<size_t> holding{0};  // requests waiting out their delay now
  metrics::Histogram& delay_seconds = metrics.Hist("tollgate_delay_seconds");
  std::atomic<uint64_t>& held_refused = metrics.Counter("tollgate_held_refused_total");
  bool ReserveHeld(std::string_view identity);
  void ReleaseHeld(std::string_view identity);

  std::vector<std::unique_ptr<Worker>> workers;

  // The constructor's steps: the store (memory, or Redis behind the deny cache) and its usage
  // backend; the PostgreSQL key source (REQUIRES: reload_mu held) and its first keys; the
  // gauges of what they count.
  store::Store& OpenStore(const config::StoreConfig& sc);
  std::vector<config::KeyConfig> StartKeySource(const config::Config& config);
  void RegisterMetrics();

  // Reload: a bad configuration is refused and the old one keeps serving.
  core::Result<bool> Reload();
  ~Impl();
  std::shared_ptr<const policy::Policy> CurrentPolicy() {
    std::lock_guard lock(policy_mu);
    return policy;
  }
};

// A client connection's place in the connection budgets: its listener's total and, unless the
// peer is a trusted proxy, its address's count. Released when the connection ends. Not
// thread-safe; moved from the accepting coroutine into the connection's.
class ConnectionSlot {
 public:
  ConnectionSlot() = default;
  ConnectionSlot(const ConnectionSlot&) = delete;
  ConnectionSlot& operator=(const ConnectionSlot&) = delete;
  ConnectionSlot(ConnectionSlot&& o) noexcept
      : total_(std::exchange(o.total_, nullptr)),
        by_address_(std::exchange(o.by_address_, nullptr)),
        address_(std::move(o.address_)) {}
  ~ConnectionSlot() {
    if (total_) total_->fetch_sub(1);
    if (!by_address_) return;
    std::lock_guard lock(by_address_->mu);
    auto it = by_address_->counts.find(address_);
    if (--it->second == 0) by_address_->counts.erase(it);
  }
  // Takes a place in `total` if fewer than `limit` are taken.
  bool TakeTotal(std::atomic<size_t>& total, size_t limit) {
    if (total.fetch_add(1) >= limit) {
      total.fetch_sub(1);
      return false;
    }
    total_ = &total;
    return true;
  }
  // Takes a place among `address`'s connections if fewer than `limit` are taken.
  bool TakeAddress(Gateway::Impl::AddressCounts& counts, std::string address, size_t limit) {
    std::lock_guard lock(counts.mu);
    size_t& n = counts.counts[address];
    if (n >= limit) {
      if (n == 0) counts.counts.erase(address);
      return false;
    }
    ++n;
    by_address_ = &counts;
    address_ = std::move(address);
    return true;
  }

 private:
  std::atomic<size_t>* total_ = nullptr;
  Gateway::Impl::AddressCounts* by_address_ = nullptr;
  std::string address_;
};

struct Worker {
  Worker(Gateway::Impl& g, size_t i) : gw(g), index(i) {}

  Gateway::Impl& gw;
  size_t index;
  Conn* conns = nullptr;  // this thread's connections (before ioc: they may outlive its run)
  size_t redis_lane = 0;  // with a Redis store: this thread's lane of it
  TopOffenders top;       // GET /admin/top
  // Only this thread touches its sockets: the reactor needs no lock around their operations.
  net::io_context ioc{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
  std::optional<tcp::acceptor> acceptor;
  std::optional<tcp::acceptor> admin;
  std::optional<tcp::acceptor> decision;  // the decision service (worker 0 only)
  std::thread thread;

  // This thread's copy of the policy, refreshed when the generation moves on. A request holds
  // its own reference for its whole life: a reload while it waits must not free what its
  // checks point into.
  std::shared_ptr<const policy::Policy> policy;
  uint64_t generation = 0;
  std::shared_ptr<const policy::Policy> Policy() {
    const uint64_t g = gw.generation.load(std::memory_order_acquire);
    if (g != generation) {
      policy = gw.CurrentPolicy();
      generation = g;
      decision_counters.clear();  // entries of older generations are never looked up again
      key_cache.clear();
    }
    return policy;
  }

  // tollgate_decisions_total{plan,check,result}, resolved once per policy: building the label
  // strings for every request showed in profiles.
  struct CounterKey {
    uint64_t generation;  // plans of a freed policy may leave their addresses to new ones
    const void* plan;
    // The check's name (its characters live in the policy, as long as the generation), or a
    // tag of the plan-wide counters below.
    const void* check;
    int result;
    bool operator==(const CounterKey&) const = default;
  };
  struct CounterKeyHash {
    size_t operator()(const CounterKey& k) const {
      return std::hash<const void*>()(k.plan) ^
             (std::hash<const void*>()(k.check) * 31 + static_cast<size_t>(k.result) * 7919) ^
             (k.generation << 40);
    }
  };
  std::unordered_map<CounterKey, std::atomic<uint64_t>*, CounterKeyHash> decision_counters;
  static constexpr char kRejectionsTag = 'r';
  static constexpr char kShadowTag = 's';
  static constexpr char kModeTag = 'm';
  // The counter of `key`, created by `create()` on first use.
  template <class Create>
  std::atomic<uint64_t>& PlanCounter(const CounterKey& key, Create create) {
    auto [it, inserted] = decision_counters.try_emplace(key, nullptr);
    if (inserted) it->second = &create();
    return *it->second;
  }
  // `check`: a plan limit's or a route limit's name, as the policy holds it.
  std::atomic<uint64_t>& DecisionCounter(uint64_t gen, const policy::Plan& plan,
                                         std::string_view check, int result) {
    return PlanCounter(
        CounterKey{gen, &plan, check.data(), result}, [&]() -> std::atomic<uint64_t>& {
          static constexpr const char* kResults[] = {"allowed", "rejected", "shadow_rejected"};
          return gw.metrics.Counter("tollgate_decisions_total",
                                    metrics::Label("plan", plan.name) + "," +
                                        metrics::Label("check", check) + "," +
                                        metrics::Label("result", kResults[result]));
        });
  }
  // tollgate_rejections_total{plan,code} and tollgate_shadow_rejections_total{plan}.
  std::atomic<uint64_t>& RejectionCounter(uint64_t gen, const policy::Plan& plan,
                                          core::RejectCode code) {
    return PlanCounter(CounterKey{gen, &plan, &kRejectionsTag, static_cast<int>(code)},
                       [&]() -> std::atomic<uint64_t>& {
                         return gw.metrics.Counter(
                             "tollgate_rejections_total",
                             metrics::Label("plan", plan.name) + "," +
                                 metrics::Label("code", core::RejectCodeName(code)));
                       });
  }
  // tollgate_requests_by_mode_total{plan,mode}: requests decided under enforcement or in shadow
  // mode (a key's own mode, its plan's cohort or mode).
  std::atomic<uint64_t>& ModeCounter(uint64_t gen, const policy::Plan& plan, bool enforced) {
    return PlanCounter(
        CounterKey{gen, &plan, &kModeTag, enforced ? 1 : 0}, [&]() -> std::atomic<uint64_t>& {
          return gw.metrics.Counter("tollgate_requests_by_mode_total",
                                    metrics::Label("plan", plan.name) + "," +
                                        metrics::Label("mode", enforced ? "enforce" : "shadow"));
        });
  }
  std::atomic<uint64_t>& ShadowRejectionCounter(uint64_t gen, const policy::Plan& plan) {
    return PlanCounter(CounterKey{gen, &plan, &kShadowTag, 0}, [&]() -> std::atomic<uint64_t>& {
      return gw.metrics.Counter("tollgate_shadow_rejections_total",
                                metrics::Label("plan", plan.name));
    });
  }

  // Presented API keys and what they resolved to under this policy (nullptr: unknown), so that
  // a busy key is hashed with SHA-256 once, not on every request. Exact up to kMaxCachedKeys
  // keys; past that it starts over (a flood of made-up keys cannot grow it).
  // Open addressing: with many keys, std::unordered_map's lookup was three dependent cache
  // misses and a division per request.
  static constexpr size_t kMaxCachedKeys = 1 << 16;
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return util::Hash64(s); }
  };
  absl::flat_hash_map<std::string, const policy::Key*, KeyHash, std::equal_to<>> key_cache;
  const policy::Key* FindByKey(const policy::Policy& pol, std::string_view presented) {
    if (auto it = key_cache.find(presented); it != key_cache.end()) return it->second;
    if (key_cache.size() >= kMaxCachedKeys) key_cache.clear();
    return key_cache.emplace(presented, pol.FindByKey(presented)).first->second;
  }

  // Keep-alive connections to the upstream: this thread's share of upstream.max_connections,
  // and of upstream.queue_size for requests waiting for one of them.
  std::vector<std::unique_ptr<UpstreamConnection>> idle;
  std::atomic<size_t> upstream_open{0};  // idle and busy; read by /metrics
  struct PoolWaiter {
    net::steady_timer* timer;
    bool granted = false;  // a connection was released for it
  };
  std::deque<PoolWaiter*> pool_waiters;  // oldest first
  std::atomic<size_t> pool_waiting{0};   // pool_waiters.size(), for /metrics

  net::awaitable<void> Accept(tcp::acceptor& acceptor, Listener listener);
  net::awaitable<void> Session(tcp::socket socket, Listener listener, ConnectionSlot slot);
  net::awaitable<void> SweepDeadlines();
  // A head of another shape than ParseRequestHead() takes, or still arriving: Beast's parser.
  net::awaitable<beast::error_code> ReadGeneralHead(Conn& stream, beast::flat_buffer& buffer,
                                                    RequestParser& parser);
  // The answer to a head that could not be read (400, 408, 413, 431) into scratch.out; false
  // when the client just went away.
  bool RenderHeadError(beast::error_code hec, Scratch& scratch);
  // A request is handled in steps (see Session()): those that need no waiting are plain
  // functions, which render our own responses (Reply) into scratch.out; only waiting on the
  // store, the usage meter or the upstream takes a coroutine.
  Step Begin(Exchange& ex, Scratch& scratch, const RequestHead& head, RequestParser* body_parser,
             std::string_view peer, std::string_view peer_ip, Listener listener);
  // Begin's parts: the canonical target (or a 400), the built-in endpoints, the identity and
  // checks. The first two answer only when they end the request.
  std::optional<Step> ReadTarget(Exchange& ex, Scratch& scratch, const RequestHead& head);
  std::optional<Step> BuiltIn(Exchange& ex, Scratch& scratch, Listener listener);
  Step Identify(Exchange& ex, Scratch& scratch, const RequestHead& head);
  // ex.forwarded_for (every X-Forwarded-For line, joined) and ex.client.
  void JoinForwardedFor(Exchange& ex, Scratch& scratch, const RequestHead& head);
  Step Conclude(Exchange& ex, Scratch& scratch);  // after the decision, in ex.verdict
  // Smoothing: holds an allowed request for its delay (ex.verdict.delay), then gives back its
  // reservation (ex.held). A coroutine of its own: only requests that may be held come here.
  net::awaitable<void> Hold(Exchange& ex);
  // Before the decision: reserves room for holding the request when one of its checks smooths,
  // or tells those checks they may not delay (the bounds are reached).
  void ReserveHold(Exchange& ex);
  // Counts and logs the verdict: tollgate_decisions_total, rejections, shadow, degraded.
  void CountDecision(Exchange& ex, const policy::Plan& plan, std::span<const store::Check> cs,
                     std::span<const core::Decision> ds);
  // The decision service: the original request's method (into ex.method) and target, from the
  // headers of the configured proxy (decision.proxy), believed only from a trusted peer.
  void DescribedRequest(Exchange& ex, const RequestHead& head, const policy::Policy& pol,
                        std::string_view& target);
  Step Pass(Exchange& ex, Scratch& scratch);  // allowed: forwarded, or the decision service's 200
  Step Reply(Exchange& ex, Scratch& scratch, bhttp::status status, std::string_view body,
             std::string_view headers = {}, std::string_view type = "application/json");
  Step AdminDeny(Exchange& ex, Scratch& scratch);
  Step AdminTop(Exchange& ex, Scratch& scratch);
  // An error of ours: an RFC 9457 problem (contract::ProblemBody) with its stable code.
  Step ReplyProblem(Exchange& ex, Scratch& scratch, bhttp::status status, std::string_view code,
                    std::string_view detail, std::string_view headers = {});
  void Finish(Exchange& ex, Scratch& scratch, int status);  // counts, meters and logs the request
  net::awaitable<bool> Forward(Conn& stream, beast::flat_buffer& buffer, Scratch& scratch);
  // Forward()'s steps (forward.cpp).
  struct UpstreamTry {
    bool request_has_body = false;
    std::unique_ptr<UpstreamConnection> up;
    bool pooled = false;         // taken from the pool (may have been closed under us)
    bool busy = false;           // no connection: the queue was full or the wait too long
    bool client_failed = false;  // the client's body could not be read
    bool nothing_written = false;
    bool reached_upstream = false;
    size_t head_size = 0;  // of the answer's head in up->buffer
  };
  using ResponseParserPtr = std::unique_ptr<bhttp::response_parser<bhttp::buffer_body>>;
  struct ResponseFraming {
    bool upstream_keep_alive = true;
    std::optional<uint64_t> length;
    bool chunked = false;  // sent to the client in chunked encoding
    bool keep = false;     // the client connection stays open
  };
  void RenderForwardHead(Exchange& ex, Scratch& scratch);
  net::awaitable<beast::error_code> SendOnce(Conn& stream, beast::flat_buffer& buffer,
                                             Scratch& scratch, UpstreamTry& t);
  net::awaitable<beast::error_code> ReadOtherHead(UpstreamConnection& up, bool is_head,
                                                  ResponseParserPtr& rp);
  void ReplyUpstreamFailure(Exchange& ex, Scratch& scratch, const UpstreamTry& t,
                            beast::error_code ec);
  ResponseFraming RenderResponseHead(Exchange& ex, Scratch& scratch, const SimpleHead* simple,
                                     const ResponseParserPtr& rp);
  // The memory store answers at once: no coroutine, no hop through the executor, no callback.
  // REQUIRES: gw.memory.
  engine::Verdict DecideNow(const engine::Engine::Request& request,
                            std::span<core::Decision> decisions) {
    return gw.engine->Conclude(request, decisions, gw.memory->ApplyNow(request.batch, decisions));
  }
  // Any store (the Redis store answers on its own thread). `request` and `decisions` must
  // live until the result is awaited.
  net::awaitable<engine::Verdict> Decide(const engine::Engine::Request& request,
                                         std::span<core::Decision> decisions);
  // An upstream connection: an idle one of the pool that has stayed quiet, else a new one
  // (Connect), else one released to this request while it waits in the queue. Null with
  // `*busy` when the queue is full or the wait ends first; null with `ec` when Connect fails.
  net::awaitable<std::unique_ptr<UpstreamConnection>> Acquire(beast::error_code& ec, bool* pooled,
                                                              bool* busy);
  std::unique_ptr<UpstreamConnection> TakeIdle();
  net::awaitable<std::unique_ptr<UpstreamConnection>> Connect(beast::error_code& ec);
  // Gives a connection back: to the pool when `reusable`, else closed; a waiting request gets
  // its turn either way.
  void Release(std::unique_ptr<UpstreamConnection> c, bool reusable);
  // GET /admin/usage and GET /v1/usage: renders the reply (a coroutine of its own, as only
  // these requests wait on the usage backend) and says the next step.
  // The usage endpoints and those of Gateway::AddAdminEndpoint: steps that await.
  net::awaitable<Step> ServeUsage(Step step, Conn& stream, beast::flat_buffer& buffer, Exchange& ex,
                                  Scratch& scratch);
  net::awaitable<Step> ServeAdminHook(Conn& stream, beast::flat_buffer& buffer, Exchange& ex,
                                      Scratch& scratch);
  // Their bodies: the status, the body into `body` (and its type).
  net::awaitable<bhttp::status> UsageExport(std::string_view query, std::string& body,
                                            std::string_view& type);
  net::awaitable<bhttp::status> KeyUsage(const policy::Key& key, core::Instant now,
                                         std::string& body);
};

// What a request carries from one step to the next (see Worker::Begin). Lives in its
// connection's Scratch, reset by Begin().
struct Exchange {
  Clock::time_point start;
  // Held for the whole request: a reload while it waits must not free what its checks point
  // into. Dropped after it.
  std::shared_ptr<const policy::Policy> policy;
  uint64_t generation = 0;  // the policy's
  const RequestHead* head = nullptr;
  RequestParser* body_parser = nullptr;  // Beast's, when it read the head (and for a body)
  std::string_view peer;                 // the client address of the connection, as limits name it
  std::string_view peer_ip;              // the socket's peer address as text
  bool decision_service = false;
  bool admin = false;      // on the admin listener
  std::string request_id;  // the client's X-Request-Id when sane, else a new one
  // Views into the request, which stays as it was read, or into its Scratch: the canonical
  // target (`path`, `query`, and `authority` of an absolute-form target, which becomes the
  // forwarded Host) and every X-Forwarded-For line joined.
  std::string_view method, path, query, authority, forwarded_for, presented;
  bool has_query = false;
  bool client_keep_alive = false;
  bool reply_keep = false;                            // after Reply()
  const Gateway::AdminHandler* admin_hook = nullptr;  // Step::kAdminHook
  RequestLog log;
  const policy::Key* key = nullptr;
  const policy::Plan* plan = nullptr;
  bool status_endpoint = false;
  bool invalid_key = false;  // deciding on the invalid-key limit of the client's address
  bool held = false;         // holds a reservation of Gateway::Impl::held (smoothing)
  bhttp::status deny_status = bhttp::status::too_many_requests;
  std::string client;
  engine::Scopes scopes;  // the batch's (primary) and those of route and per-address limits
  core::Instant now;
  size_t n_checks = 0;
  std::array<store::Check, kMaxChecks> checks;
  std::array<core::Decision, kMaxChecks> decisions;
  engine::Engine::Request request;
  Clock::time_point decide_start;
  engine::Verdict verdict;

  // Whether the request was read in full (its body too): only then is the connection reusable.
  bool RequestRead() const { return !body_parser || body_parser->is_done(); }
};

// A connection's buffers and its request's state, reused from one request to the next, in
// Session()'s frame: nothing of a request lives in a coroutine frame of its own, which would be
// allocated per request.
struct Scratch {
  alignas(std::max_align_t)
      std::array<std::byte, 2048> arena;  // Beast's fields, when it reads the head
  std::string out;   // what the gateway writes of its own: a response, a forwarded head
  std::string body;  // the body of a response of ours, before `out` is rendered around it
  std::string log_line;
  std::string target;         // the canonical target, when it differs from the request's
  std::string forwarded_for;  // X-Forwarded-For lines joined, when there are several
  HeaderList rate_headers;
  SimpleHead upstream_head;
  RequestHead head;
  Exchange exchange;
};

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// RFC 9110 9.2.2: a request that may be sent again when a connection fails under it.
inline bool IsIdempotent(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "OPTIONS" || method == "TRACE" ||
         method == "PUT" || method == "DELETE";
}

// Our own responses (not the upstream's) are rendered whole into one buffer and written with
// one call.
void RenderResponse(std::string& out, bhttp::status status, bool keep_alive, unsigned version,
                    std::string_view content_type, std::string_view headers, std::string_view body);

}  // namespace tollgate::http
