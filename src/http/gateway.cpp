#include <tollgate/http/gateway.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <type_traits>
#include <unordered_map>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <absl/container/flat_hash_map.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http.hpp>

#include <tollgate/engine/engine.hpp>
#include <tollgate/http/contract.hpp>
#include <tollgate/http/request_head.hpp>
#include <tollgate/http/target.hpp>
#include <tollgate/metrics/metrics.hpp>
#include <tollgate/policy/policy.hpp>
#include <tollgate/core/calendar.hpp>
#include <tollgate/engine/checks.hpp>
#include <tollgate/engine/deny_cache.hpp>
#include <tollgate/engine/usage_meter.hpp>
#include <tollgate/policy/postgres_keys.hpp>
#include <tollgate/store/memory_store.hpp>
#include <tollgate/store/redis_store.hpp>
#include <tollgate/store/redis_usage.hpp>
#include <tollgate/util/clock.hpp>
#include <tollgate/util/hash.hpp>
#include <tollgate/util/query.hpp>
#include <tollgate/util/text.hpp>

#include <sys/resource.h>
#include <sys/socket.h>

#include <deque>

#include "socket.hpp"
#ifdef TOLLGATE_HAVE_RLS
#include <tollgate/rls/rls_server.hpp>
#endif

// GCC 12 inlines Asio's recycling allocator for coroutine frames (aligned_alloc, released with
// free through aligned_delete) and then reports the pair as mismatched: a false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace tollgate::http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr auto kTuple = net::as_tuple(net::use_awaitable);
constexpr size_t kMaxChecks = 16;
constexpr size_t kRelayChunk = 16 * 1024;
constexpr size_t kMaxUpstreamHead = 64 * 1024;

struct Endpoint {
  std::string host;
  std::string port;
};

Endpoint SplitHostPort(const std::string& s, const char* what) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error(std::string(what) + ": expected host:port, got '" + s + "'");
  std::string host = s.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return {host, s.substr(colon + 1)};
}

struct UpstreamTarget {
  Endpoint endpoint;
  std::string base_path;  // prefixed to every forwarded target; empty or "/api"
};

UpstreamTarget ParseUpstream(const std::string& url) {
  std::string rest = url.substr(7);  // after http://
  const size_t slash = rest.find('/');
  UpstreamTarget t;
  if (slash != std::string::npos) {
    t.base_path = rest.substr(slash);
    if (t.base_path == "/") t.base_path.clear();
    rest = rest.substr(0, slash);
  }
  if (rest.find(':') == std::string::npos) rest += ":80";
  t.endpoint = SplitHostPort(rest, "upstream.url");
  return t;
}

// server.max_connections when the file says 0 or more than the process can open: the soft
// RLIMIT_NOFILE is raised to the hard one first (as nginx's worker_rlimit_nofile does), and the
// descriptors the process needs besides client connections are kept apart.
config::ServerConfig WithFileLimit(const config::Config& config) {
  config::ServerConfig server = config.server;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return server;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  // Upstream pool, admin budget, store and key-source connections (a few per thread),
  // listeners, logs.
  const size_t threads = config.server.threads > 0 ? static_cast<size_t>(config.server.threads)
                                                   : std::max(1u, std::thread::hardware_concurrency());
  const size_t reserve = config.upstream.max_connections + config.server.admin_max_connections + 64 + 4 * threads;
  const size_t files = lim.rlim_cur == RLIM_INFINITY ? SIZE_MAX : static_cast<size_t>(lim.rlim_cur);
  const size_t fit = files > reserve + 16 ? files - reserve : 16;
  const size_t wanted = server.max_connections == 0 ? std::min<size_t>(10'000, fit) : server.max_connections;
  if (wanted > fit) {
    std::fprintf(stderr,
                 "{\"level\":\"warn\",\"msg\":\"server.max_connections lowered to fit the file limit\","
                 "\"configured\":%zu,\"max_connections\":%zu,\"nofile\":%zu}\n",
                 wanted, fit, files);
  }
  server.max_connections = std::min(wanted, fit);
  return server;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

using util::AppendDecimal;

// Fields that describe one connection (RFC 9110 7.6.1), and the framing fields, which the relay
// writes itself for the body it sends.
enum class FieldKind { kEndToEnd, kConnection, kContentLength, kTransferEncoding, kOtherHopByHop };

FieldKind Classify(std::string_view name) {
  // By length first: this runs for every field of every proxied request and response, and
  // most fields have a length none of these has.
  using policy::Policy;
  auto is = [name](std::string_view f) { return Policy::EqualsIgnoreCase(name, f); };
  bool hop = false;
  switch (name.size()) {
    case 2: hop = is("TE"); break;
    case 7: hop = is("Trailer") || is("Upgrade"); break;
    case 10:
      if (is("Connection")) return FieldKind::kConnection;
      hop = is("Keep-Alive");
      break;
    case 14: return is("Content-Length") ? FieldKind::kContentLength : FieldKind::kEndToEnd;
    case 16: hop = is("Proxy-Connection"); break;
    case 17: return is("Transfer-Encoding") ? FieldKind::kTransferEncoding : FieldKind::kEndToEnd;
    case 18: hop = is("Proxy-Authenticate"); break;
    case 19: hop = is("Proxy-Authorization"); break;
    default: break;
  }
  return hop ? FieldKind::kOtherHopByHop : FieldKind::kEndToEnd;
}

bool IsHopByHopOrFraming(std::string_view name) { return Classify(name) != FieldKind::kEndToEnd; }

// Appends the end-to-end fields as "Name: value\r\n" lines. Dropped: hop-by-hop and framing
// fields, those named in Connection, and those `skip` says the gateway sets itself.
// `for_each(fn)` calls fn(name, value) for each field, in order.
template <class ForEach, class Skip>
void AppendEndToEndFields(ForEach for_each, util::StringAppender& out, Skip skip) {
  std::vector<std::string_view> named;  // by Connection, other than close and keep-alive
  for_each([&named](std::string_view name, std::string_view v) {
    if (!policy::Policy::EqualsIgnoreCase(name, "Connection")) return;
    policy::Policy::AnyListElement(v, [&named](std::string_view token) {
      if (!token.empty() && !policy::Policy::EqualsIgnoreCase(token, "close") &&
          !policy::Policy::EqualsIgnoreCase(token, "keep-alive")) {
        named.push_back(token);
      }
      return false;  // every element
    });
  });
  for_each([&](std::string_view name, std::string_view value) {
    if (IsHopByHopOrFraming(name) || skip(name)) return;
    if (std::any_of(named.begin(), named.end(),
                    [name](std::string_view n) { return policy::Policy::EqualsIgnoreCase(n, name); })) {
      return;
    }
    out << name << ": " << value << "\r\n";
  });
}

// The upstream's response head, when Beast's parser read it.
template <class Fields, class Skip>
void AppendEndToEnd(const Fields& f, util::StringAppender& out, Skip skip) {
  AppendEndToEndFields(
      [&f](auto fn) {
        for (const auto& field : f) fn(field.name_string(), field.value());
      },
      out, skip);
}

// The client's request head.
template <class Skip>
void AppendEndToEnd(const RequestHead& head, util::StringAppender& out, Skip skip) {
  AppendEndToEndFields(
      [&head](auto fn) {
        for (const RequestHead::Field& field : head.fields) fn(field.name, field.value);
      },
      out, skip);
}

// Our own responses (not the upstream's) are rendered whole into one buffer and written with
// one call.
void RenderResponse(std::string& out, bhttp::status status, bool keep_alive, unsigned version,
                    std::string_view content_type, std::string_view headers, std::string_view body) {
  out.clear();
  util::StringAppender text(out);
  text << "HTTP/1.1 " << static_cast<unsigned>(status) << " " << bhttp::obsolete_reason(status)
       << "\r\nServer: tollgate\r\nContent-Type: " << content_type << "\r\nContent-Length: " << body.size()
       << "\r\n";
  if (!keep_alive) {
    text << "Connection: close\r\n";
  } else if (version < 11) {
    text << "Connection: keep-alive\r\n";
  }
  text << headers << "\r\n" << body;
}

// Thread-safe line writer for the JSON access log and bounded-rate error log.
class Log {
 public:
  void Access(const std::string& line) {
    std::lock_guard lock(mu_);
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  void Error(const std::string& line) {
    std::lock_guard lock(mu_);
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }
  void Flush() {
    std::lock_guard lock(mu_);
    std::fflush(stdout);
  }

 private:
  std::mutex mu_;
};

// Appends the time now as 2026-11-29T21:59:56.123Z. The part to the second is formatted once a
// second per thread: every access-log line starts with it.
void AppendIsoNow(std::string& out) {
  const auto now = std::chrono::system_clock::now();
  const auto t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  thread_local std::time_t formatted = -1;
  thread_local char seconds[72];  // 2026-11-29T21:59:56; room for any int the fields may hold
  thread_local size_t seconds_size = 0;
  if (t != formatted) {
    std::tm tm;
    gmtime_r(&t, &tm);
    const int n = std::snprintf(seconds, sizeof seconds, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    seconds_size = static_cast<size_t>(std::clamp(n, 0, static_cast<int>(sizeof seconds) - 1));
    formatted = t;
  }
  const char millis[] = {'.', static_cast<char>('0' + ms / 100), static_cast<char>('0' + ms / 10 % 10),
                         static_cast<char>('0' + ms % 10), 'Z'};
  out.append(seconds, seconds_size).append(millis, sizeof millis);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

// What a connection was accepted on.
enum class Listener {
  kGateway,   // the reverse proxy
  kAdmin,     // reload, key lookup, usage export; loopback by default
  kDecision,  // the decision service for nginx auth_request, Traefik ForwardAuth, ext_authz
};

// Awaits a callback-style operation: `start(resume)` calls resume(T) once, on any thread; the
// coroutine resumes on its own executor. Not a coroutine itself (one frame fewer per await):
// what `start` refers to must live until the result is awaited.
template <class T, class Start>
net::awaitable<T> Await(Start start) {
  // GCC 12 miscompiles a lambda that owns a std::string moved through a coroutine frame (an
  // invalid free; found by the usage tests): capture references and pointers only.
  static_assert(std::is_trivially_copyable_v<Start>, "capture references or pointers only");
  return net::async_initiate<decltype(net::use_awaitable), void(T)>(
      [start = std::move(start)](auto handler) mutable {
        auto h = std::make_shared<decltype(handler)>(std::move(handler));
        start([h](T value) {
          auto ex = net::get_associated_executor(*h);
          net::post(ex, [h, value = std::move(value)]() mutable { std::move (*h)(std::move(value)); });
        });
      },
      net::use_awaitable);
}

// A socket with a deadline. Setting one is a store: the worker's sweep cancels the operations
// of connections past theirs, which then fail with beast::error::timeout (through Check()).
// Cheaper than a timer armed and cancelled around every read and write. Lives on its
// worker's thread, linked into the worker's list while it exists.
class Conn {
 public:
  Conn(Conn*& list, tcp::socket s) : socket(std::move(s)), list_(list), next_(list) {
    if (next_) next_->prev_ = this;
    list_ = this;
  }
  explicit Conn(Conn*& list, net::io_context& ioc) : Conn(list, tcp::socket(ioc)) {}
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  ~Conn() {
    (prev_ ? prev_->next_ : list_) = next_;
    if (next_) next_->prev_ = prev_;
  }

  void ExpiresAfter(Clock::duration d) {
    deadline_ = Clock::now() + d;
    timed_out_ = false;
  }
  // The result of an operation on `socket`: a cancellation by the sweep reads as a timeout.
  beast::error_code Check(beast::error_code ec) const {
    return timed_out_ && ec == net::error::operation_aborted ? beast::error_code(beast::error::timeout) : ec;
  }
  // Cancels the operations of every connection in `list` past its deadline.
  static void Sweep(Conn* list, Clock::time_point now) {
    for (Conn* c = list; c; c = c->next_) {
      if (c->deadline_ > now) continue;
      c->deadline_ = Clock::time_point::max();
      c->timed_out_ = true;
      beast::error_code ignored;
      c->socket.cancel(ignored);
    }
  }

  internal::Socket socket;

 private:
  Conn*& list_;
  Conn* prev_ = nullptr;
  Conn* next_;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool timed_out_ = false;
};

// Deadlines are enforced to within this.
constexpr milliseconds kSweepInterval{10};
// After an accept failed for want of descriptors or memory.
constexpr milliseconds kAcceptBackoff{50};

struct UpstreamConnection {
  UpstreamConnection(Conn*& list, net::io_context& ioc) : conn(list, ioc) {}
  Conn conn;
  beast::flat_buffer buffer;
};

struct Worker;

// A request's fields come from an arena of its connection, emptied between requests: Beast's
// fields otherwise cost a malloc and a free per field.
using RequestAllocator = std::pmr::polymorphic_allocator<char>;
using RequestParser = bhttp::request_parser<bhttp::buffer_body, RequestAllocator>;

struct Scratch;  // a connection's buffers, below
struct Exchange;  // a request's state from one step to the next, below
// What is left to do for a request after one step of it.
enum class Step {
  kReply,       // send scratch.out, a response of ours
  kDecide,      // decide ex.request, then Conclude()
  kAdminUsage,  // GET /admin/usage
  kKeyUsage,    // GET /v1/usage
  kForward,     // to the upstream
};

struct Gateway::Impl {
  Impl(std::string path, config::Config config);

  std::string config_path;
  const config::ServerConfig server;  // not reloadable: needs a restart
  const config::UpstreamConfig upstream_config;
  const UpstreamTarget upstream;
  const std::string upstream_host;  // host[:port] of upstream.url, for requests without Host

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
  std::unique_ptr<store::UsageBackend> usage_backend;
  // Usage goes to the backend a tenth of the keys per tick (100 ms), each key once a second:
  // one write per key per second, in ten small batches. One batch a second of every key seen
  // held decisions up behind it on the same Redis (with 10,000 keys, the random-key p99 of the
  // Redis benchmark went from 10 to 25 ms); every key every tick cost Redis a write per key and
  // tick, and the memory backend a merge (with 10,000 keys, the decision service's p99 went
  // from 4 to 5 ms).
  static constexpr size_t kUsageSlices = 10;
  std::unique_ptr<engine::UsageMeter> meter;
  // Keys from PostgreSQL (keys.source: postgres); the policy is rebuilt when they change.
  std::unique_ptr<policy::PostgresKeySource> key_source;
  config::Config file_config;  // the configuration file as last loaded (keys from it or PG)
#ifdef TOLLGATE_HAVE_RLS
  std::unique_ptr<rls::RlsServer> rls;
#endif
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
  std::atomic<uint64_t>& untrusted_headers = metrics.Counter("tollgate_decision_untrusted_headers_total");
  std::atomic<size_t> in_flight{0};
  std::atomic<bool> draining{false};

  std::vector<std::unique_ptr<Worker>> workers;

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
      : total_(std::exchange(o.total_, nullptr)), by_address_(std::exchange(o.by_address_, nullptr)),
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
    size_t check;
    int result;
    bool operator==(const CounterKey&) const = default;
  };
  struct CounterKeyHash {
    size_t operator()(const CounterKey& k) const {
      return std::hash<const void*>()(k.plan) ^ (k.check * 31 + static_cast<size_t>(k.result) * 7919) ^
             (k.generation << 40);
    }
  };
  std::unordered_map<CounterKey, std::atomic<uint64_t>*, CounterKeyHash> decision_counters;
  // The counter of `key`, created by `create()` on first use.
  template <class Create>
  std::atomic<uint64_t>& PlanCounter(const CounterKey& key, Create create) {
    auto [it, inserted] = decision_counters.try_emplace(key, nullptr);
    if (inserted) it->second = &create();
    return *it->second;
  }
  std::atomic<uint64_t>& DecisionCounter(uint64_t gen, const policy::Plan& plan, size_t check,
                                         int result) {
    return PlanCounter(CounterKey{gen, &plan, check, result}, [&]() -> std::atomic<uint64_t>& {
      static constexpr const char* kResults[] = {"allowed", "rejected", "shadow_rejected"};
      return gw.metrics.Counter("tollgate_decisions_total",
                                "plan=\"" + plan.name + "\",check=\"" + plan.limits[check].name +
                                    "\",result=\"" + kResults[result] + "\"");
    });
  }
  // tollgate_rejections_total{plan,code} and tollgate_shadow_rejections_total{plan}.
  std::atomic<uint64_t>& RejectionCounter(uint64_t gen, const policy::Plan& plan, core::RejectCode code) {
    return PlanCounter(CounterKey{gen, &plan, SIZE_MAX, static_cast<int>(code)}, [&]() -> std::atomic<uint64_t>& {
      return gw.metrics.Counter("tollgate_rejections_total", "plan=\"" + plan.name + "\",code=\"" +
                                                                 std::string(core::RejectCodeName(code)) + "\"");
    });
  }
  std::atomic<uint64_t>& ShadowRejectionCounter(uint64_t gen, const policy::Plan& plan) {
    return PlanCounter(CounterKey{gen, &plan, SIZE_MAX - 1, 0}, [&]() -> std::atomic<uint64_t>& {
      return gw.metrics.Counter("tollgate_shadow_rejections_total", "plan=\"" + plan.name + "\"");
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
  // A request is handled in steps (see Session()): those that need no waiting are plain
  // functions, which render our own responses (Reply) into scratch.out; only waiting on the
  // store, the usage meter or the upstream takes a coroutine.
  Step Begin(Exchange& ex, Scratch& scratch, const RequestHead& head, RequestParser* body_parser,
             std::string_view peer, std::string_view peer_ip, Listener listener);
  Step Conclude(Exchange& ex, Scratch& scratch);  // after the decision, in ex.verdict
  // The decision service: the original request's method (into ex.method) and target, from the
  // headers of the configured proxy (decision.proxy), believed only from a trusted peer.
  void DescribedRequest(Exchange& ex, const RequestHead& head, const policy::Policy& pol, std::string_view& target);
  Step Pass(Exchange& ex, Scratch& scratch);  // allowed: forwarded, or the decision service's 200
  Step Reply(Exchange& ex, Scratch& scratch, bhttp::status status, std::string_view body,
             std::string_view headers = {}, std::string_view type = "application/json");
  void Finish(Exchange& ex, Scratch& scratch, int status);  // counts, meters and logs the request
  net::awaitable<bool> Forward(Conn& stream, beast::flat_buffer& buffer, Scratch& scratch);
  // The memory store answers at once: no coroutine, no hop through the executor, no callback.
  // REQUIRES: gw.memory.
  engine::Verdict DecideNow(const engine::Engine::Request& request, std::span<core::Decision> decisions) {
    return gw.engine->Conclude(request, decisions, gw.memory->ApplyNow(request.batch, decisions));
  }
  // Any store (the Redis store answers on its own thread). `request` and `decisions` must
  // live until the result is awaited.
  net::awaitable<engine::Verdict> Decide(const engine::Engine::Request& request,
                                         std::span<core::Decision> decisions);
  // An upstream connection: an idle one of the pool that has stayed quiet, else a new one
  // (Connect), else one released to this request while it waits in the queue. Null with
  // `*busy` when the queue is full or the wait ends first; null with `ec` when Connect fails.
  net::awaitable<std::unique_ptr<UpstreamConnection>> Acquire(beast::error_code& ec, bool* pooled, bool* busy);
  std::unique_ptr<UpstreamConnection> TakeIdle();
  net::awaitable<std::unique_ptr<UpstreamConnection>> Connect(beast::error_code& ec);
  // Gives a connection back: to the pool when `reusable`, else closed; a waiting request gets
  // its turn either way.
  void Release(std::unique_ptr<UpstreamConnection> c, bool reusable);
  // GET /admin/usage and GET /v1/usage: the status, the body into `body` (and its type).
  net::awaitable<bhttp::status> UsageExport(std::string_view query, std::string& body, std::string_view& type);
  net::awaitable<bhttp::status> KeyUsage(const policy::Key& key, core::Instant now, std::string& body);
};

namespace {

// Views into the policy the request holds (and string literals): the log line, if any, is
// written before the request lets go of it.
struct RequestLog {
  bool metered = false;  // counted in usage (a limited request of a known key)
  std::string_view key_id;
  std::string_view plan;
  std::string_view decision = "none";
  int64_t cost = 0;
  int upstream_status = 0;
};

// Writes as much of `rest` as the socket takes at once (sockets are non-blocking) and consumes
// it. A response almost always fits the socket's buffer whole, and written at once it takes no
// operation through the reactor and the executor. Would-block is not an error.
template <class Buffers>
beast::error_code WriteNow(tcp::socket& socket, beast::buffers_suffix<Buffers>& rest) {
  beast::error_code ec;
  rest.consume(socket.write_some(rest, ec));
  if (ec == net::error::would_block || ec == net::error::try_again) ec = {};
  return ec;
}

// What WriteNow() left, asynchronously. (Hot paths call this only when something is left: a
// coroutine's frame costs an allocation.)
template <class Buffers>
net::awaitable<beast::error_code> WriteRest(Conn& c, beast::buffers_suffix<Buffers>& rest, milliseconds timeout) {
  c.ExpiresAfter(timeout);
  auto [ec, n] = co_await net::async_write(c.socket, rest, kTuple);
  co_return c.Check(ec);
}

// All of `bufs`: WriteNow(), then WriteRest() (for responses off the hot paths).
template <class Buffers>
net::awaitable<beast::error_code> WriteAll(Conn& c, const Buffers& bufs, milliseconds timeout) {
  beast::buffers_suffix<Buffers> rest(bufs);
  beast::error_code ec = WriteNow(c.socket, rest);
  if (!ec && beast::buffer_bytes(rest) > 0) ec = co_await WriteRest(c, rest, timeout);
  co_return ec;
}

net::awaitable<bool> Write(Conn& stream, const std::string& data, bool keep_alive) {
  const beast::error_code ec = co_await WriteAll(stream, net::buffer(data), std::chrono::seconds(30));
  co_return !ec && keep_alive;
}

// Writes `head`, then the body `p` reads from `in`, to `out`, a chunk at a time (a large export
// never sits in memory whole): in chunked encoding when `chunked`, else as it comes. The head
// goes out with the first chunk, a small message in one write.
template <bool isRequest, class Allocator>
net::awaitable<beast::error_code> Relay(bhttp::parser<isRequest, bhttp::buffer_body, Allocator>& p,
                                        Conn& in, beast::flat_buffer& in_buf,
                                        Conn& out, std::string_view head, bool chunked,
                                        milliseconds timeout, bool* in_failed) {
  // Allocated when there is a body: most requests have none, and the buffer would make this
  // coroutine's frame too large for Asio to recycle.
  std::unique_ptr<char[]> buf;
  static constexpr std::string_view kCrlf = "\r\n", kLastChunk = "0\r\n\r\n";
  char size_line[24];
  bool last = false;
  do {
    size_t n = 0;
    if (!p.is_done()) {
      if (!buf) buf = std::make_unique_for_overwrite<char[]>(kRelayChunk);
      p.get().body().data = buf.get();
      p.get().body().size = kRelayChunk;
      in.ExpiresAfter(timeout);
      auto [read_ec, r] = co_await bhttp::async_read(in.socket, in_buf, p, kTuple);
      beast::error_code ec = in.Check(read_ec);
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) {
        *in_failed = true;
        co_return ec;
      }
      n = kRelayChunk - p.get().body().size;
    }
    last = p.is_done();
    std::array<net::const_buffer, 5> bufs;  // empty ones are skipped
    bufs[0] = net::buffer(head.data(), head.size());
    head = {};
    if (n > 0) {
      if (chunked) {
        const auto r = std::to_chars(size_line, size_line + sizeof size_line - 2, n, 16);
        std::memcpy(r.ptr, "\r\n", 2);
        bufs[1] = net::buffer(size_line, static_cast<size_t>(r.ptr + 2 - size_line));
        bufs[3] = net::buffer(kCrlf.data(), kCrlf.size());
      }
      bufs[2] = net::buffer(buf.get(), n);
    }
    if (last && chunked) bufs[4] = net::buffer(kLastChunk.data(), kLastChunk.size());
    if (net::buffer_size(bufs) == 0) continue;
    beast::buffers_suffix<decltype(bufs)> rest(bufs);
    beast::error_code ec = WriteNow(out.socket, rest);
    if (!ec && beast::buffer_bytes(rest) > 0) ec = co_await WriteRest(out, rest, timeout);
    if (ec) co_return ec;
  } while (!last);
  co_return beast::error_code{};
}

// An upstream response head of the common shape, read in place from the connection's buffer:
// a final status, a Content-Length (or no body), no transfer coding, no folded lines, no
// fields named in Connection. Such a response is relayed without Beast's parser; anything
// else is left to it (ParseSimpleHead returns false).
struct SimpleHead {
  unsigned status = 0;
  std::string_view reason;
  // The end-to-end field lines (not hop-by-hop or framing), without their CRLF, and the length
  // of each one's name: the relay writes them without parsing the head again.
  struct Line {
    std::string_view text;
    size_t name_size;
  };
  static constexpr size_t kMaxLines = 48;  // more: left to Beast's parser
  std::array<Line, kMaxLines> lines;
  size_t line_count = 0;
  std::optional<uint64_t> content_length;
  bool keep_alive = true;
  size_t size = 0;  // of the head, through its blank line
};

// Calls fn(name, value, line) for each "name: value" line of `fields`; false if one is not of
// that shape.
template <class Fn>
bool ForEachField(std::string_view fields, Fn fn) {
  const char* p = fields.data();
  const char* const end = p + fields.size();
  while (p < end) {
    const auto* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    if (!nl || nl == p || nl[-1] != '\r') return false;  // a bare LF: left to Beast's parser
    const std::string_view line(p, static_cast<size_t>(nl - 1 - p));
    p = nl + 1;
    const size_t colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos || line[0] == ' ' || line[0] == '\t' ||
        line[colon - 1] == ' ' || line[colon - 1] == '\t') {
      return false;
    }
    fn(line.substr(0, colon), policy::Policy::Trim(line.substr(colon + 1)), line);
  }
  return true;
}

// Where the head at the start of `data` ends (just after its blank line), or npos if `data`
// does not hold all of it yet. One memchr per line.
size_t HeadEnd(std::string_view data) {
  const char* const begin = data.data();
  const char* const end = begin + data.size();
  for (const char* p = begin; p < end; ++p) {
    p = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    if (!p) break;
    if (end - p >= 3 && p > begin && p[-1] == '\r' && p[1] == '\r' && p[2] == '\n') {
      return static_cast<size_t>(p + 3 - begin);
    }
  }
  return std::string_view::npos;
}

// `head`: a whole head through its blank line, as ReadHead() found it. `h` is filled afresh
// (it is reused from one response to the next).
bool ParseSimpleHead(std::string_view head, bool is_head, SimpleHead& h) {
  const std::string_view line = head.substr(0, head.find("\r\n"));
  auto digit = [&line](size_t i) { return line[i] >= '0' && line[i] <= '9'; };
  if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || (line[7] != '0' && line[7] != '1') ||
      line[8] != ' ' || !digit(9) || !digit(10) || !digit(11) || (line.size() > 12 && line[12] != ' ')) {
    return false;
  }
  h.size = head.size();
  h.status = static_cast<unsigned>((line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0'));
  if (h.status < 200) return false;  // interim responses: the parser skips them
  h.reason = line.size() > 13 ? line.substr(13) : std::string_view();
  h.keep_alive = line[7] == '1';
  h.line_count = 0;
  h.content_length.reset();
  bool simple = true;
  const std::string_view fields = head.substr(line.size() + 2, head.size() - 2 - (line.size() + 2));
  const bool parsed = ForEachField(fields, [&](std::string_view name, std::string_view value, std::string_view text) {
    switch (Classify(name)) {
      case FieldKind::kEndToEnd:
        if (h.line_count == h.lines.size()) {
          simple = false;
        } else {
          h.lines[h.line_count++] = {text, name.size()};
        }
        break;
      case FieldKind::kTransferEncoding: simple = false; break;
      case FieldKind::kContentLength: {
        uint64_t n = 0;
        const auto r = std::from_chars(value.data(), value.data() + value.size(), n);
        if (r.ec != std::errc() || r.ptr != value.data() + value.size() || value.empty() ||
            (h.content_length && *h.content_length != n)) {
          simple = false;
        }
        h.content_length = n;
        break;
      }
      case FieldKind::kConnection:
        if (policy::Policy::EqualsIgnoreCase(value, "close")) {
          h.keep_alive = false;
        } else if (policy::Policy::EqualsIgnoreCase(value, "keep-alive")) {
          h.keep_alive = true;
        } else {
          simple = false;  // names hop-by-hop fields
        }
        break;
      case FieldKind::kOtherHopByHop: break;
    }
  });
  const bool no_body = is_head || h.status == 204 || h.status == 304;
  if (!parsed || !simple || (!h.content_length && !no_body)) return false;
  if (no_body && !is_head) h.content_length.reset();
  return true;
}

std::string_view View(const beast::flat_buffer& b) {
  return {static_cast<const char*>(b.data().data()), b.size()};
}

// A head Beast's parser read, as a RequestHead of views into its message.
void HeadFromBeast(const RequestParser& p, RequestHead& head) {
  const auto& m = p.get();
  head.Clear();
  head.method = m.method_string();
  head.target = m.target();
  head.version = m.version();
  head.keep_alive = m.keep_alive();
  head.chunked = p.chunked();
  if (const auto n = p.content_length()) head.content_length = *n;
  for (const auto& f : m) head.fields.push_back({f.name_string(), f.value()});
}

// Reads from `c` into `buf` until `buf` holds a whole head, through its blank line, whose size
// goes to `*head_size`. `after_request`: the request was just written (see
// Socket::ReadAfterRequest()).
net::awaitable<beast::error_code> ReadHead(Conn& c, beast::flat_buffer& buf, milliseconds timeout,
                                           bool after_request, size_t* head_size) {
  for (;;) {
    *head_size = HeadEnd(View(buf));
    if (*head_size != std::string_view::npos) co_return beast::error_code{};
    if (buf.size() >= kMaxUpstreamHead) co_return beast::error_code(bhttp::error::header_limit);
    c.ExpiresAfter(timeout);
    if (std::exchange(after_request, false)) c.socket.ReadAfterRequest();
    auto [ec, n] = co_await c.socket.async_read_some(buf.prepare(4096), kTuple);
    if (ec) co_return c.Check(ec);
    buf.commit(n);
  }
}

// Writes `head` and then `length` body bytes from `in` (those already in `in_buf` first) to
// `out`, as they come.
net::awaitable<beast::error_code> RelayLength(Conn& in, beast::flat_buffer& in_buf, Conn& out,
                                              std::string_view head, uint64_t length,
                                              milliseconds timeout, bool* in_failed) {
  for (;;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(length, in_buf.size()));
    const std::array<net::const_buffer, 2> bufs = {net::buffer(head.data(), head.size()),
                                                   net::buffer(in_buf.data().data(), n)};
    head = {};
    if (net::buffer_size(bufs) > 0) {
      beast::buffers_suffix<decltype(bufs)> rest(bufs);
      beast::error_code ec = WriteNow(out.socket, rest);
      if (!ec && beast::buffer_bytes(rest) > 0) ec = co_await WriteRest(out, rest, timeout);
      if (ec) co_return ec;
    }
    in_buf.consume(n);
    length -= n;
    if (length == 0) co_return beast::error_code{};
    in.ExpiresAfter(timeout);
    auto [ec, r] = co_await in.socket.async_read_some(
        in_buf.prepare(static_cast<size_t>(std::min<uint64_t>(length, kRelayChunk))), kTuple);
    if (ec) {
      *in_failed = true;
      co_return in.Check(ec);
    }
    in_buf.commit(r);
  }
}

}  // namespace

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
  std::string_view peer;     // the client address of the connection, as limits name it
  std::string_view peer_ip;  // the socket's peer address as text
  bool decision_service = false;
  // Views into the request, which stays as it was read, or into its Scratch: the canonical
  // target (`path`, `query`, and `authority` of an absolute-form target, which becomes the
  // forwarded Host) and every X-Forwarded-For line joined.
  std::string_view method, path, query, authority, forwarded_for, presented;
  bool has_query = false;
  bool client_keep_alive = false;
  bool reply_keep = false;  // after Reply()
  RequestLog log;
  const policy::Key* key = nullptr;
  const policy::Plan* plan = nullptr;
  bool status_endpoint = false;
  bool invalid_key = false;  // deciding on the invalid-key limit of the client's address
  bhttp::status deny_status = bhttp::status::too_many_requests;
  std::string client;
  std::string scope;
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
  alignas(std::max_align_t) std::array<std::byte, 2048> arena;  // Beast's fields, when it reads the head
  std::string out;  // what the gateway writes of its own: a response, a forwarded head
  std::string body;  // the body of a response of ours, before `out` is rendered around it
  std::string log_line;
  std::string target;         // the canonical target, when it differs from the request's
  std::string forwarded_for;  // X-Forwarded-For lines joined, when there are several
  HeaderList rate_headers;
  SimpleHead upstream_head;
  RequestHead head;
  Exchange exchange;
};

namespace {
// Whether nothing arrived on an idle upstream connection: no byte and no end of stream. A
// connection that became readable while idle is never reused: the bytes are a response to
// something the upstream read that we did not send (a GET body it took for a request, issue
// 18), and an EOF means it closed (Node.js closes idle connections after 5 s).
bool StayedQuiet(int fd) {
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// RFC 9110 9.2.2: a request that may be sent again when a connection fails under it.
bool IsIdempotent(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "OPTIONS" || method == "TRACE" || method == "PUT" ||
         method == "DELETE";
}
}  // namespace

std::unique_ptr<UpstreamConnection> Worker::TakeIdle() {
  while (!idle.empty()) {
    auto c = std::move(idle.back());
    idle.pop_back();
    if (c->conn.socket.is_open() && StayedQuiet(c->conn.socket.native_handle())) return c;
    gw.upstream_stale.fetch_add(1, std::memory_order_relaxed);
    upstream_open.fetch_sub(1, std::memory_order_relaxed);
  }
  return nullptr;
}

void Worker::Release(std::unique_ptr<UpstreamConnection> c, bool reusable) {
  if (c && reusable) {
    idle.push_back(std::move(c));
  } else {
    c.reset();
    upstream_open.fetch_sub(1, std::memory_order_relaxed);
  }
  if (!pool_waiters.empty()) {
    PoolWaiter* w = pool_waiters.front();
    pool_waiters.pop_front();
    pool_waiting.store(pool_waiters.size(), std::memory_order_relaxed);
    w->granted = true;
    w->timer->cancel();
  }
}

net::awaitable<std::unique_ptr<UpstreamConnection>> Worker::Acquire(beast::error_code& ec, bool* pooled, bool* busy) {
  const size_t workers = gw.workers.size();
  const size_t share = std::max<size_t>(1, gw.upstream_config.max_connections / workers);
  const size_t queue_share = gw.upstream_config.queue_size == 0 ? 0 : std::max<size_t>(1, gw.upstream_config.queue_size / workers);
  std::optional<net::steady_timer> timer;
  for (;;) {
    if (auto c = TakeIdle()) {
      *pooled = true;
      co_return c;
    }
    *pooled = false;
    if (upstream_open.load(std::memory_order_relaxed) < share) co_return co_await Connect(ec);
    // Every connection is busy (slow clients reading large responses hold theirs): wait for one,
    // in a bounded queue for a bounded time, rather than fail at once.
    if (pool_waiters.size() >= queue_share) break;
    if (!timer) {
      timer.emplace(ioc);
      timer->expires_after(milliseconds(gw.upstream_config.queue_timeout_ms));
    }
    PoolWaiter w{&*timer};
    pool_waiters.push_back(&w);
    pool_waiting.store(pool_waiters.size(), std::memory_order_relaxed);
    co_await timer->async_wait(kTuple);
    if (!w.granted) {
      pool_waiters.erase(std::find(pool_waiters.begin(), pool_waiters.end(), &w));
      pool_waiting.store(pool_waiters.size(), std::memory_order_relaxed);
      break;
    }
  }
  *busy = true;
  co_return nullptr;
}

net::awaitable<std::unique_ptr<UpstreamConnection>> Worker::Connect(beast::error_code& ec) {
  // The place is taken before the first wait: requests connecting at once cannot overshoot it.
  upstream_open.fetch_add(1, std::memory_order_relaxed);
  struct Undo {
    Worker* w;
    ~Undo() {
      if (w) w->Release(nullptr, false);
    }
  } undo{this};
  auto c = std::make_unique<UpstreamConnection>(conns, ioc);
  tcp::resolver resolver(ioc);
  auto [rec, results] = co_await resolver.async_resolve(gw.upstream.endpoint.host,
                                                        gw.upstream.endpoint.port, kTuple);
  if (rec) {
    ec = rec;
    co_return nullptr;
  }
  c->conn.ExpiresAfter(milliseconds(gw.upstream_config.connect_timeout_ms));
  auto [cec, ep] = co_await net::async_connect(c->conn.socket, results, kTuple);
  if (cec) {
    ec = c->conn.Check(cec);
    co_return nullptr;
  }
  beast::error_code ignored;
  c->conn.socket.set_option(tcp::no_delay(true), ignored);
  c->conn.socket.non_blocking(true, ignored);  // for WriteAll's first attempt
  undo.w = nullptr;
  co_return c;
}

net::awaitable<void> Worker::Accept(tcp::acceptor& a, Listener listener) {
  const bool admin_listener = listener == Listener::kAdmin;
  const char* const listener_name = admin_listener ? "admin" : listener == Listener::kDecision ? "decision" : "gateway";
  auto refused = [&](const char* reason) -> std::atomic<uint64_t>& {
    return gw.metrics.Counter("tollgate_connections_refused_total",
                              std::string("listener=\"") + listener_name + "\",reason=\"" + reason + "\"");
  };
  std::atomic<uint64_t>& refused_total = refused("max_connections");
  std::atomic<uint64_t>& refused_address = refused("per_address");
  net::steady_timer backoff(ioc);
  for (;;) {
    auto [ec, socket] = co_await a.async_accept(kTuple);
    if (ec) {
      if (ec == net::error::operation_aborted || !a.is_open()) co_return;
      gw.accept_errors.fetch_add(1, std::memory_order_relaxed);
      // Out of descriptors or buffers: accepting again at once fails again at once (a busy loop
      // that starves every connection). Wait for connections to end.
      if (ec == net::error::no_descriptors || ec == net::error::no_buffer_space || ec == net::error::no_memory ||
          ec == boost::system::errc::too_many_files_open_in_system) {
        backoff.expires_after(kAcceptBackoff);
        co_await backoff.async_wait(kTuple);
      }
      continue;
    }
    beast::error_code ignored;
    ConnectionSlot slot;
    if (!slot.TakeTotal(admin_listener ? gw.admin_connections : gw.connections,
                        admin_listener ? gw.server.admin_max_connections : gw.server.max_connections)) {
      refused_total.fetch_add(1, std::memory_order_relaxed);
      socket.close(ignored);
      continue;
    }
    if (!admin_listener && gw.server.max_connections_per_address > 0) {
      const auto remote = socket.remote_endpoint(ignored);
      std::string address = ignored ? std::string() : remote.address().to_string();
      if (!Policy()->IsTrusted(address) &&
          !slot.TakeAddress(gw.by_address, std::move(address), gw.server.max_connections_per_address)) {
        refused_address.fetch_add(1, std::memory_order_relaxed);
        socket.close(ignored);
        continue;
      }
    }
    socket.set_option(tcp::no_delay(true), ignored);
    socket.non_blocking(true, ignored);  // for WriteAll's first attempt
    net::co_spawn(ioc, Session(std::move(socket), listener, std::move(slot)),
                  [this](std::exception_ptr e) {
                    if (!e) return;
                    try {
                      std::rethrow_exception(e);
                    } catch (const std::exception& ex) {
                      gw.log.Error(std::string("{\"level\":\"error\",\"msg\":\"session failed\",\"error\":\"") +
                                   JsonEscape(ex.what()) + "\"}");
                    }
                  });
  }
}

net::awaitable<void> Worker::SweepDeadlines() {
  net::steady_timer timer(ioc);
  for (;;) {
    timer.expires_after(kSweepInterval);
    auto [ec] = co_await timer.async_wait(kTuple);
    if (ec) co_return;
    Conn::Sweep(conns, Clock::now());
  }
}

net::awaitable<void> Worker::Session(tcp::socket socket, Listener listener, ConnectionSlot slot) {
  Conn stream(conns, std::move(socket));
  stream.socket.DrainedReads(true);  // see socket.hpp
  const ConnectionSlot held = std::move(slot);  // released when the connection ends
  beast::error_code ec;
  const auto remote = stream.socket.remote_endpoint(ec);
  const std::string peer_ip = ec ? "" : remote.address().to_string();
  // Normalised once (an IPv4-mapped peer becomes IPv4): a request without X-Forwarded-For uses
  // it as its client address as it is.
  const std::string peer = ec ? "" : Policy()->ClientAddress(peer_ip, {});
  beast::flat_buffer buffer;
  Scratch scratch;
  std::pmr::monotonic_buffer_resource fields_arena(scratch.arena.data(), scratch.arena.size(),
                                                   std::pmr::new_delete_resource());
  for (;;) {
    if (buffer.size() == 0) {
      // Keep-alive: wait for the next request's first bytes.
      stream.ExpiresAfter(milliseconds(gw.server.idle_timeout_ms));
      auto [rec, n] = co_await stream.socket.async_read_some(buffer.prepare(4096), kTuple);
      if (rec) break;
      buffer.commit(n);
    }
    // Most heads arrive whole and have the common shape: they are parsed in place, in the
    // buffer, which keeps them until the request is done. The others, and heads still arriving,
    // go to Beast's parser, whose message then fills the same RequestHead.
    RequestHead& head = scratch.head;
    size_t fast_size = 0;
    const bool fast = ParseRequestHead(View(buffer), gw.server.max_header_bytes, head, &fast_size) ==
                      HeadParse::kComplete;
    std::optional<RequestParser> parser;  // the general one, and a body's
    beast::error_code hec;
    if (!fast) {
      fields_arena.release();  // the last request's parser is gone
      parser.emplace(std::piecewise_construct, std::make_tuple(), std::make_tuple(RequestAllocator(&fields_arena)));
      parser->header_limit(static_cast<uint32_t>(gw.server.max_header_bytes));
      parser->body_limit(gw.server.max_body_bytes);
      stream.ExpiresAfter(milliseconds(gw.server.header_timeout_ms));
      // The head, parsed from the bytes already read, reading more only while the parser needs
      // them (Beast's async_read_header costs a trip through the executor even when the whole
      // head is already here).
      for (;;) {
        buffer.consume(parser->put(buffer.data(), hec));
        if (hec == bhttp::error::need_more) {
          hec = {};
        } else if (hec || parser->is_header_done()) {
          break;
        }
        auto [rec, n] = co_await stream.socket.async_read_some(buffer.prepare(4096), kTuple);
        if (rec == net::error::eof) {
          // A head cut short is malformed; a connection closed between requests is not.
          if (parser->got_some()) {
            parser->put_eof(hec);
          } else {
            hec = bhttp::error::end_of_stream;
          }
          break;
        }
        hec = stream.Check(rec);
        if (hec) break;
        buffer.commit(n);
      }
      if (!hec) HeadFromBeast(*parser, head);
    }
    if (hec) {
      bhttp::status status = bhttp::status::bad_request;
      std::string code = "bad_request";
      if (hec == bhttp::error::header_limit) {
        status = bhttp::status::request_header_fields_too_large;
        code = "header_too_large";
      } else if (hec == bhttp::error::body_limit) {
        // A Content-Length above server.max_body_bytes is refused before any byte of the body.
        status = bhttp::status::payload_too_large;
        code = "body_too_large";
      } else if (hec == beast::error::timeout) {
        status = bhttp::status::request_timeout;
        code = "header_timeout";
      } else if (hec == bhttp::error::end_of_stream || hec == net::error::eof ||
                 hec == net::error::connection_reset) {
        break;
      }
      RenderResponse(scratch.out, status, false, 11, "application/json", {}, ErrorBody(code, hec.message()));
      gw.requests_by_class[2]->fetch_add(1, std::memory_order_relaxed);
      co_await Write(stream, scratch.out, false);
      break;
    }
    gw.in_flight.fetch_add(1);
    bool keep = false;
    try {
      // The request, in steps (see Worker::Begin), here rather than in a coroutine of its own:
      // a request answered by us with the memory store allocates no coroutine frame.
      Exchange& ex = scratch.exchange;
      Step step = Begin(ex, scratch, head, parser ? &*parser : nullptr, peer, peer_ip, listener);
      if (step == Step::kAdminUsage || step == Step::kKeyUsage) {
        std::string_view type = "application/json";
        const bhttp::status status = step == Step::kAdminUsage ? co_await UsageExport(ex.query, scratch.body, type)
                                                               : co_await KeyUsage(*ex.key, ex.now, scratch.body);
        step = Reply(ex, scratch, status, scratch.body, {}, type);
      } else if (step == Step::kDecide) {
        const std::span<core::Decision> decisions{ex.decisions.data(), ex.n_checks};
        if (gw.memory) {
          ex.verdict = DecideNow(ex.request, decisions);
        } else {
          ex.verdict = co_await Decide(ex.request, decisions);
        }
        step = Conclude(ex, scratch);
      }
      if (step == Step::kForward) {
        keep = co_await Forward(stream, buffer, scratch);
      } else {
        beast::buffers_suffix<net::const_buffer> rest(net::buffer(scratch.out));
        beast::error_code wec = WriteNow(stream.socket, rest);
        if (!wec && beast::buffer_bytes(rest) > 0) wec = co_await WriteRest(stream, rest, std::chrono::seconds(30));
        keep = !wec && ex.reply_keep;
      }
      ex.policy.reset();
      if (fast) buffer.consume(fast_size);  // the head was read in place
    } catch (...) {
      gw.in_flight.fetch_sub(1);
      throw;
    }
    gw.in_flight.fetch_sub(1);
    if (!keep || gw.draining.load()) break;
  }
  stream.socket.shutdown(tcp::socket::shutdown_send, ec);
  stream.socket.close(ec);
}

namespace {

store::Outcome OutcomeOf(int status, bool rejected) {
  if (rejected) return store::Outcome::kRejected;
  if (status >= 500) return store::Outcome::kServerError;
  if (status >= 400) return store::Outcome::kClientError;
  return store::Outcome::kSuccess;
}

std::string CountsJson(const store::UsageCounts& c) {
  std::string out = "{";
  for (size_t o = 0; o < store::kOutcomes; ++o) {
    out += (o ? "," : "") + std::string("\"") + store::kOutcomeNames[o] + "\":{\"requests\":" +
           std::to_string(c.requests[o]) + ",\"cost\":" + std::to_string(c.cost[o]) + "}";
  }
  return out + "}";
}

// The decoded value of query parameter `name`, or empty.
std::string QueryValue(std::string_view query, std::string_view name) {
  return util::QueryValue(query, name).value_or(std::string());
}

// GET /admin/keys/ID.
std::string AdminKeyBody(const policy::Key& k) {
  std::string body = "{\"id\":\"" + JsonEscape(k.id) + "\",\"account\":\"" + JsonEscape(k.account) +
                     "\",\"plan\":\"" + JsonEscape(k.plan->name) + "\",\"configured_plan\":\"" +
                     JsonEscape(k.plan_name) + "\",\"enforced\":" + (k.plan->enforced ? "true" : "false") +
                     ",\"overrides\":[";
  for (size_t i = 0; i < k.overrides.size(); ++i) {
    const auto& o = k.overrides[i];
    body += (i ? "," : "") + std::string("{\"limit\":\"") + JsonEscape(k.plan->limits[o.limit_index].name) +
            "\",\"quota\":" + std::to_string(o.limit.PolicyQuota()) + ",\"expires_unix\":" +
            (o.expires ? std::to_string(o.expires->unix_micros() / 1'000'000) : "null") + "}";
  }
  return body + "]}";
}

// GET /v1/rate-limit: the caller's limits and usage.
std::string RateLimitStatusBody(const policy::Key& key, const policy::Plan& plan,
                                std::span<const store::Check> cs, std::span<const core::Decision> ds,
                                const engine::Verdict& v) {
  const int p = v.primary;
  std::string body = "{\"key_id\":\"" + JsonEscape(key.id) + "\",\"plan\":\"" + JsonEscape(plan.name) +
                     "\",\"mode\":\"" + (plan.enforced ? "enforce" : "shadow") + "\"";
  if (p >= 0) {
    body += ",\"limit\":" + std::to_string(ds[p].limit) + ",\"remaining\":" + std::to_string(ds[p].remaining) +
            ",\"resetSeconds\":" + std::to_string(ds[p].reset.CeilSeconds());
  }
  body += ",\"policies\":[";
  std::string burst, quota;
  for (size_t i = 0; i < cs.size(); ++i) {
    const auto& d = ds[i];
    const auto alg = cs[i].limit->algorithm();
    std::string item = "{\"name\":\"" + JsonEscape(cs[i].name) + "\",\"algorithm\":\"" +
                       std::string(core::AlgorithmName(alg)) + "\",\"limit\":" + std::to_string(d.limit) +
                       ",\"remaining\":" + std::to_string(d.remaining) + ",\"resetSeconds\":" +
                       std::to_string(d.reset.CeilSeconds()) + ",\"windowSeconds\":" +
                       std::to_string(cs[i].limit->PolicyWindowSeconds(v.now));
    if (alg == core::Algorithm::kQuota) {
      const auto& q = std::get<core::Quota>(cs[i].limit->impl());
      item += ",\"period\":\"" + std::string(q.period() == core::Period::kDay ? "day" : "month") +
              "\",\"used\":" + std::to_string(d.used) + ",\"allowance\":" +
              (q.allowance() ? std::to_string(*q.allowance()) : "null") + ",\"ceiling\":" +
              (q.ceiling() ? std::to_string(*q.ceiling()) : "null") + ",\"overAllowance\":" +
              (d.over_allowance ? "true" : "false");
      if (quota.empty()) quota = item + "}";
    } else if (burst.empty()) {
      burst = item + "}";
    }
    body += (i ? "," : "") + item + "}";
  }
  body += "]";
  if (!burst.empty()) body += ",\"burst\":" + burst;
  if (!quota.empty()) body += ",\"quota\":" + quota;
  return body + "}";
}

// One period's part of GET /v1/usage: the key's counts among the account's records.
void AppendUsagePeriod(std::string& body, std::string_view name, const std::string& period,
                       std::string_view key_id, const std::vector<engine::UsageRecord>& records) {
  store::UsageCounts counts;
  for (const auto& r : records) {
    if (r.key_id == key_id) counts = r.counts;
  }
  body += ",\"" + std::string(name) + "\":{\"period\":\"" + period + "\",\"usage\":" + CountsJson(counts) + "}";
}

std::string UsageHead(const policy::Key& key) {
  return "{\"key_id\":\"" + JsonEscape(key.id) + "\",\"account\":\"" + JsonEscape(key.account) + "\"";
}

}  // namespace

net::awaitable<engine::Verdict> Worker::Decide(const engine::Engine::Request& request,
                                               std::span<core::Decision> decisions) {
  return Await<engine::Verdict>([this, &request, decisions](auto resume) {
    gw.engine->Decide(request, decisions, std::move(resume));
  });
}

// Billing export: tollgate usage --period 2026-11 [--account ID] --format csv|json.
net::awaitable<bhttp::status> Worker::UsageExport(std::string_view query, std::string& body,
                                                  std::string_view& type) {
  const std::string period = QueryValue(query, "period");
  const std::string format = QueryValue(query, "format");
  const std::string account = QueryValue(query, "account");
  auto records = co_await Await<core::Result<std::vector<engine::UsageRecord>>>(
      [this, &period, &account](auto resume) { gw.meter->Query(period, account, std::move(resume)); });
  if (!records) {
    body = ErrorBody("invalid_period", records.error());
    co_return bhttp::status::bad_request;
  }
  if (format == "json") {
    body = engine::UsageJson(*records);
  } else {
    body = engine::UsageCsv(*records);
    type = "text/csv";
  }
  co_return bhttp::status::ok;
}

// The caller's metered usage today and this month (UTC).
net::awaitable<bhttp::status> Worker::KeyUsage(const policy::Key& key, core::Instant now, std::string& body) {
  const std::string day = core::PeriodLabel(core::Period::kDay, now);
  const std::string month = core::PeriodLabel(core::Period::kMonth, now);
  body = UsageHead(key);
  for (const std::string& period : {day, month}) {
    auto records = co_await Await<core::Result<std::vector<engine::UsageRecord>>>(
        [this, &period, &key](auto resume) { gw.meter->Query(period, key.account, std::move(resume)); });
    if (!records) {
      body = ErrorBody("usage_unavailable", records.error());
      co_return bhttp::status::service_unavailable;
    }
    AppendUsagePeriod(body, period == day ? "day" : "month", period, key.id, *records);
  }
  body += "}";
  co_return bhttp::status::ok;
}

void Worker::Finish(Exchange& ex, Scratch& scratch, int status) {
  gw.requests_by_class[static_cast<size_t>(std::clamp(status / 100, 2, 5) - 2)]->fetch_add(
      1, std::memory_order_relaxed);
  const RequestLog& rlog = ex.log;
  if (ex.key && rlog.metered) {
    gw.meter->Record(ex.key->account, ex.key->id, OutcomeOf(status, rlog.decision == "rejected"), rlog.cost,
                     util::SystemClock::Instance().Now());
  }
  if (!gw.server.access_log) return;
  // Built in a buffer of the connection; JSON-escaped: paths and addresses are client bytes.
  std::string& line = scratch.log_line;
  line.assign("{\"ts\":\"");
  AppendIsoNow(line);
  line.append("\",\"method\":\"");
  AppendJsonEscaped(line, ex.method);
  line.append("\",\"path\":\"");
  AppendJsonEscaped(line, ex.path);
  line.append("\",\"status\":");
  AppendDecimal(line, status);
  line.append(",\"client\":\"");
  AppendJsonEscaped(line, ex.peer);
  line.append("\",\"key_id\":\"");
  AppendJsonEscaped(line, rlog.key_id);
  line.append("\",\"plan\":\"");
  AppendJsonEscaped(line, rlog.plan);
  line.append("\",\"decision\":\"").append(rlog.decision).append("\",\"cost\":");
  AppendDecimal(line, rlog.cost);
  line.append(",\"upstream_status\":");
  AppendDecimal(line, rlog.upstream_status);
  // Milliseconds to the microsecond, without printf's floating-point formatting.
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - ex.start).count();
  const char frac[] = {'.', static_cast<char>('0' + us / 100 % 10), static_cast<char>('0' + us / 10 % 10),
                       static_cast<char>('0' + us % 10)};
  line.append(",\"latency_ms\":");
  AppendDecimal(line, us / 1000);
  line.append(frac, sizeof frac).append("}\n");
  gw.log.Access(line);
}

Step Worker::Reply(Exchange& ex, Scratch& scratch, bhttp::status status, std::string_view body,
                   std::string_view headers, std::string_view type) {
  ex.reply_keep = ex.client_keep_alive && ex.RequestRead() && !gw.draining.load();
  RenderResponse(scratch.out, status, ex.reply_keep, ex.head->version, type, headers, body);
  Finish(ex, scratch, static_cast<int>(status));
  return Step::kReply;
}

Step Worker::Begin(Exchange& ex, Scratch& scratch, const RequestHead& head, RequestParser* body_parser,
                   std::string_view peer, std::string_view peer_ip, Listener listener) {
  ex.start = Clock::now();
  ex.policy = Policy();
  ex.generation = generation;
  ex.head = &head;
  ex.body_parser = body_parser;
  ex.peer = peer;
  ex.peer_ip = peer_ip;
  ex.log = {};
  ex.key = nullptr;
  ex.plan = nullptr;
  ex.n_checks = 0;
  ex.invalid_key = false;
  ex.status_endpoint = false;
  ex.presented = ex.forwarded_for = ex.authority = {};
  scratch.rate_headers.Clear();
  const policy::Policy& pol = *ex.policy;
  ex.decision_service = listener == Listener::kDecision;
  ex.client_keep_alive = head.keep_alive;
  // The request stays as it was read for the whole exchange (the forwarded head is rendered
  // apart), so views into it stay valid. The decision service decides about the original
  // request, which the proxy in front describes in headers.
  std::string_view target = head.target;
  ex.method = head.method;
  ex.path = target;  // for the log line of a refusal
  ex.query = {};
  if (ex.decision_service) DescribedRequest(ex, head, pol, target);

  // Framing and Host first (RFC 9112), then one canonical target for everything after:
  // routes, cost, the log and the forwarded request line (issue 18).
  std::string_view host;
  const char* bad = CheckRequestHead(head, &host);
  const char* detail = bad ? "see docs/http-contract.md" : nullptr;
  CanonicalTarget canonical;
  if (!bad) {
    const config::TargetConfig& tc = ex.decision_service ? gw.decision.request_target : gw.server.request_target;
    detail = CanonicalizeTarget(ex.method, target,
                                {.allow_encoded_slash = tc.allow_encoded_slash,
                                 .allow_path_parameters = tc.allow_path_parameters},
                                scratch.target, canonical);
    if (detail) bad = "invalid_request_target";
  }
  if (bad) {
    gw.metrics.Counter("tollgate_bad_requests_total", std::string("code=\"") + bad + "\"")
        .fetch_add(1, std::memory_order_relaxed);
    ex.client_keep_alive = false;  // what follows on the connection cannot be trusted to be framed
    return Reply(ex, scratch, bhttp::status::bad_request, ErrorBody(bad, detail));
  }
  ex.path = canonical.path;
  ex.query = canonical.query;
  ex.has_query = canonical.has_query;
  ex.authority = canonical.authority;
  const std::string_view method = ex.method, path = ex.path;

  // Built-in endpoints, on every listener.
  if (method == "GET" && (path == "/healthz" || path == "/readyz") && !ex.decision_service) {
    return Reply(ex, scratch, bhttp::status::ok,
                 gw.draining.load() && path == "/readyz" ? "{\"status\":\"draining\"}" : "{\"status\":\"ok\"}");
  }
  if (method == "GET" && path == "/metrics" && !ex.decision_service) {
    return Reply(ex, scratch, bhttp::status::ok, gw.metrics.Render(), {}, "text/plain; version=0.0.4");
  }
  if (listener == Listener::kAdmin) {
    if (method == "POST" && path == "/admin/reload") {
      auto r = gw.Reload();
      return r ? Reply(ex, scratch, bhttp::status::ok, "{\"status\":\"reloaded\"}")
               : Reply(ex, scratch, bhttp::status::bad_request, ErrorBody("invalid_config", r.error()));
    }
    if (method == "GET" && path.substr(0, 12) == "/admin/keys/") {
      const policy::Key* k = pol.FindById(path.substr(12));
      if (!k) return Reply(ex, scratch, bhttp::status::not_found, ErrorBody("unknown_key", "no key with this id"));
      return Reply(ex, scratch, bhttp::status::ok, AdminKeyBody(*k));
    }
    if (method == "GET" && path == "/admin/usage") return Step::kAdminUsage;
    return Reply(ex, scratch, bhttp::status::not_found, ErrorBody("not_found", "unknown admin endpoint"));
  }

  // Identity and checks.
  const policy::Route& route = pol.Match(method, path);
  ex.now = util::SystemClock::Instance().Now();
  ex.status_endpoint = !ex.decision_service && method == "GET" && path == "/v1/rate-limit";
  const bool usage_endpoint = !ex.decision_service && method == "GET" && path == "/v1/usage";
  // Every X-Forwarded-For line is one list (RFC 9110 5.3): a trusted proxy that appends its
  // own line after the client's must be read, not the client's first line.
  size_t forwarded_lines = 0;
  for (const RequestHead::Field& f : head.fields) {
    if (f.name.size() != 15 || !policy::Policy::EqualsIgnoreCase(f.name, "X-Forwarded-For")) continue;
    if (++forwarded_lines == 1) {
      ex.forwarded_for = f.value;
      continue;
    }
    if (forwarded_lines == 2) scratch.forwarded_for.assign(ex.forwarded_for);
    scratch.forwarded_for.append(", ").append(f.value);
    ex.forwarded_for = scratch.forwarded_for;
  }
  if (ex.forwarded_for.empty()) {
    ex.client.assign(peer);  // already in the form ClientAddress() gives (see Session())
  } else {
    ex.client = pol.ClientAddress(peer_ip, ex.forwarded_for);
  }
  ex.deny_status = ex.decision_service ? static_cast<bhttp::status>(gw.decision.deny_status)
                                       : bhttp::status::too_many_requests;

  // The status and usage endpoints are about the caller's key, whatever the route, and
  // consume nothing.
  const bool keyed = route.identity == config::RouteIdentity::kKey || ex.status_endpoint || usage_endpoint;
  if (keyed) {
    ex.presented = pol.PresentedKey([&head](const std::string& name) { return head.Get(name); });
    if (!ex.presented.empty()) ex.key = FindByKey(pol, ex.presented);
  }
  const bool costs_nothing = ex.status_endpoint || usage_endpoint;
  const engine::Admission admission = engine::Admit(pol, route, keyed, ex.key, ex.client, ex.query,
                                                    costs_nothing ? std::optional<int64_t>(0) : std::nullopt, ex.now,
                                                    ex.checks, ex.scope);
  ex.n_checks = admission.n;
  if (admission.kind == engine::Admission::Kind::kInvalidKey) {
    // Decided below (Conclude): repeated invalid keys from one address are limited per address.
    gw.invalid_keys.fetch_add(1, std::memory_order_relaxed);
    ex.log.decision = "invalid_key";
    ex.invalid_key = true;
    ex.request = {.batch = {.scope = ex.scope, .checks = {ex.checks.data(), 1}},
                  .fail_mode = engine::FailMode::kOpen};
    return Step::kDecide;
  }
  ex.plan = admission.plan;
  if (ex.key) ex.log.key_id = ex.key->id;
  if (usage_endpoint) return Step::kKeyUsage;
  if (ex.plan) ex.log.plan = ex.plan->name;
  if (admission.kind == engine::Admission::Kind::kInvalidCost) {
    return Reply(ex, scratch, bhttp::status::bad_request, ErrorBody("invalid_cost", admission.error));
  }
  ex.log.cost = admission.cost;
  ex.log.metered = admission.kind == engine::Admission::Kind::kChecks && !ex.status_endpoint;
  if (ex.n_checks > 0) {
    ex.request = {.batch = {.scope = ex.scope,
                            .checks = {ex.checks.data(), ex.n_checks},
                            .mode = ex.status_endpoint ? store::Mode::kPeek : store::Mode::kConsume},
                  .fail_mode = route.fail_mode == config::FailMode::kClosed ? engine::FailMode::kClosed
                                                                             : engine::FailMode::kOpen};
    ex.decide_start = Clock::now();
    return Step::kDecide;
  }
  if (ex.status_endpoint) return Reply(ex, scratch, bhttp::status::not_found, ErrorBody("not_found", "no limits apply"));
  return Pass(ex, scratch);
}

void Worker::DescribedRequest(Exchange& ex, const RequestHead& head, const policy::Policy& pol,
                              std::string_view& target) {
  // One proxy's headers only: Traefik forwards every client header to the check, so a client's
  // own X-Original-URI beside Traefik's X-Forwarded-Uri must not be read (issue 18). Envoy's
  // ext_authz sends the original method and path as the check request's own.
  std::string_view uri, method;
  switch (gw.decision.proxy) {
    case config::DecisionProxy::kNginx:
      uri = head.Get("X-Original-URI");
      method = head.Get("X-Original-Method");
      break;
    case config::DecisionProxy::kTraefik:
      uri = head.Get("X-Forwarded-Uri");
      method = head.Get("X-Forwarded-Method");
      break;
    case config::DecisionProxy::kEnvoy: return;
  }
  if (uri.empty() && method.empty()) return;
  if (!pol.IsTrusted(ex.peer_ip)) {
    // Anyone who can reach the listener could name a cheaper route: decided on the check
    // request's own line instead, and counted.
    gw.untrusted_headers.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!uri.empty()) target = uri;
  if (!method.empty()) ex.method = method;
}

Step Worker::Conclude(Exchange& ex, Scratch& scratch) {
  const policy::Policy& pol = *ex.policy;
  const engine::Verdict& v = ex.verdict;
  HeaderList& rate_headers = scratch.rate_headers;
  const std::span<const store::Check> cs{ex.checks.data(), ex.n_checks};
  const std::span<const core::Decision> ds{ex.decisions.data(), ex.n_checks};
  if (ex.invalid_key) {
    if (v.kind == engine::Verdict::Kind::kRejected) {
      rate_headers.Add("Retry-After", std::max<int64_t>(1, v.retry_after.CeilSeconds()));
      return Reply(ex, scratch, ex.deny_status, RejectionBody(cs, ds, v, static_cast<int>(ex.deny_status)),
                   rate_headers.Rendered(), "application/problem+json");
    }
    return Reply(ex, scratch, bhttp::status::unauthorized,
                 ErrorBody(ex.presented.empty() ? "missing_api_key" : "invalid_api_key",
                           ex.presented.empty() ? "an API key is required" : "the API key is not valid"),
                 "WWW-Authenticate: Bearer\r\n");
  }
  gw.limiter_latency.Observe(SecondsSince(ex.decide_start));
  const policy::Plan& plan = *ex.plan;

  if (ex.status_endpoint) {
    // GET /v1/rate-limit: the caller's limits and usage; consumes nothing.
    if (v.kind == engine::Verdict::Kind::kDegraded || v.kind == engine::Verdict::Kind::kUnavailable) {
      return Reply(ex, scratch, bhttp::status::service_unavailable,
                   RejectionBody(cs, ds, engine::Verdict{.kind = engine::Verdict::Kind::kUnavailable}),
                   "Retry-After: 1\r\n", "application/problem+json");
    }
    AppendRateLimitHeaders(pol.config().headers, cs, ds, v, rate_headers);
    ex.log.decision = "status";
    return Reply(ex, scratch, bhttp::status::ok, RateLimitStatusBody(*ex.key, plan, cs, ds, v),
                 plan.enforced ? std::string_view(rate_headers.Rendered()) : "");
  }

  for (size_t i = 0; i < cs.size(); ++i) {
    const int result = ds[i].allowed ? 0 : (cs[i].enforced ? 1 : 2);
    DecisionCounter(ex.generation, plan, i, result).fetch_add(1, std::memory_order_relaxed);
  }
  if (v.shadow_rejections > 0) {
    ShadowRejectionCounter(ex.generation, plan).fetch_add(1, std::memory_order_relaxed);
    ex.log.decision = "shadow_rejected";
  }
  switch (v.kind) {
    case engine::Verdict::Kind::kAllowed:
      if (ex.log.decision == "none") ex.log.decision = "allowed";
      if (plan.enforced) AppendRateLimitHeaders(pol.config().headers, cs, ds, v, rate_headers);
      break;
    case engine::Verdict::Kind::kDegraded:
      ex.log.decision = "degraded";
      gw.metrics.Counter("tollgate_degraded_total").fetch_add(1, std::memory_order_relaxed);
      gw.LogStoreFailure(v.store_error);
      break;
    case engine::Verdict::Kind::kUnavailable:
      ex.log.decision = "unavailable";
      gw.metrics.Counter("tollgate_limiter_unavailable_total").fetch_add(1, std::memory_order_relaxed);
      gw.LogStoreFailure(v.store_error);
      AppendRateLimitHeaders(pol.config().headers, cs, ds, v, rate_headers);
      return Reply(ex, scratch, ex.decision_service ? ex.deny_status : bhttp::status::service_unavailable,
                   RejectionBody(cs, ds, v), rate_headers.Rendered(), "application/problem+json");
    case engine::Verdict::Kind::kRejected:
      ex.log.decision = "rejected";
      RejectionCounter(ex.generation, plan, v.code).fetch_add(1, std::memory_order_relaxed);
      AppendRateLimitHeaders(pol.config().headers, cs, ds, v, rate_headers);
      if (ex.decision_service) {
        // nginx drops an auth subrequest's body: the code travels in a header too.
        rate_headers.Add("X-Tollgate-Code", core::RejectCodeName(v.code));
      }
      scratch.body.clear();
      AppendRejectionBody(scratch.body, cs, ds, v, static_cast<int>(ex.deny_status));
      return Reply(ex, scratch, ex.deny_status, scratch.body, rate_headers.Rendered(), "application/problem+json");
  }
  return Pass(ex, scratch);
}

Step Worker::Pass(Exchange& ex, Scratch& scratch) {
  if (!ex.decision_service) return Step::kForward;
  // Allowed: the proxy in front forwards the request itself. The key id and plan go back in
  // headers the proxy may pass upstream (nginx: auth_request_set).
  if (ex.key) {
    scratch.rate_headers.Add("X-Tollgate-Key-Id", ex.key->id);
    scratch.rate_headers.Add("X-Tollgate-Plan", ex.plan->name);
  }
  return Reply(ex, scratch, bhttp::status::ok, "", scratch.rate_headers.Rendered(), "text/plain");
}

// Forwards the request to the upstream and relays its response (Step::kForward).
net::awaitable<bool> Worker::Forward(Conn& stream, beast::flat_buffer& buffer, Scratch& scratch) {
  Exchange& ex = scratch.exchange;
  const RequestHead& req = *ex.head;
  // Forward to the upstream: the request's head, rendered apart from the request (which stays
  // as it was read), then its body.
  scratch.out.clear();
  const bool request_chunked = req.chunked;
  // In a lambda: its locals (the appender's kilobyte of buffer) live on the stack, not in
  // this coroutine's frame, which is allocated per request.
  [&] {
    util::StringAppender head(scratch.out);
    // The canonical target, the one that was matched and costed (issue 18).
    head << req.method << " ";
    if (ex.path == "*") {
      head << "*";
    } else {
      head << gw.upstream.base_path << ex.path;
    }
    if (ex.has_query) head << "?" << ex.query;
    head << " HTTP/1.1\r\n";
    const bool replace_host = !ex.authority.empty();  // an absolute-form target names the host
    const auto& key_headers = ex.policy->config().identity.api_key_headers;
    AppendEndToEnd(req, head, [&](std::string_view name) {
      // Ours: the whole X-Tollgate- family and X-Forwarded-For, in any spelling an upstream
      // may read as them ('_' for '-': CGI, WSGI, PHP); and a key header spelt with '_',
      // which tollgate did not read as a key but the upstream might.
      if (ReadsAs(name, "x-tollgate-", true) || ReadsAs(name, "x-forwarded-for") ||
          policy::Policy::EqualsIgnoreCase(name, "Expect") ||
          (replace_host && policy::Policy::EqualsIgnoreCase(name, "Host"))) {
        return true;
      }
      return name.find('_') != std::string_view::npos &&
             std::any_of(key_headers.begin(), key_headers.end(),
                         [name](const std::string& h) { return ReadsAs(name, h); });
    });
    if (replace_host) {
      head << "Host: " << ex.authority << "\r\n";
    } else if (req.Get("Host").empty() && req.version < 11) {
      // HTTP/1.0 may omit Host; HTTP/1.1, which we send, may not (RFC 9112 3.2).
      head << "Host: " << gw.upstream_host << "\r\n";
    }
    head << "X-Forwarded-For: " << ex.forwarded_for << (ex.forwarded_for.empty() ? "" : ", ") << ex.peer << "\r\n";
    if (ex.key) head << "X-Tollgate-Key-Id: " << ex.key->id << "\r\nX-Tollgate-Plan: " << ex.plan->name << "\r\n";
    if (request_chunked) {
      head << "Transfer-Encoding: chunked\r\n";
    } else if (req.content_length) {
      head << "Content-Length: " << *req.content_length << "\r\n";
    }
    head << "\r\n";
  }();
  const bool request_has_body = !ex.RequestRead();
  if (request_has_body && policy::Policy::EqualsIgnoreCase(req.Get("Expect"), "100-continue")) {
    // The client waits for our go-ahead before its body: given now that the limits let the
    // request through, so a rejected request never uploads its body. The upstream sees no Expect.
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    if (co_await WriteAll(stream, net::buffer(kContinue.data(), kContinue.size()),
                          milliseconds(gw.upstream_config.timeout_ms))) {
      co_return false;
    }
  }
  const bool is_head = req.method == "HEAD";

  beast::error_code ec;
  std::unique_ptr<UpstreamConnection> up;
  std::unique_ptr<bhttp::response_parser<bhttp::buffer_body>> rp;  // heads of other shapes
  const SimpleHead* simple = nullptr;
  bool reached_upstream = false;
  size_t head_size = 0;  // of the upstream response's head, once ReadHead() found it
  const auto t_up = Clock::now();
  bool busy = false;
  // One retry on a fresh connection when a pooled one fails before any response byte, for a
  // request without a body (it cannot be read from the client twice) that is idempotent or of
  // which nothing was written: the upstream may have executed a POST that got no answer.
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool pooled = true;
    up = TakeIdle();  // most requests: no coroutine frame for Acquire()
    if (!up) up = co_await Acquire(ec, &pooled, &busy);
    if (!up) break;
    bool client_failed = false;
    bool after_request = false;
    bool nothing_written = false;
    if (request_has_body) {
      ec = co_await Relay(*ex.body_parser, stream, buffer, up->conn, scratch.out, request_chunked,
                          milliseconds(gw.upstream_config.timeout_ms), &client_failed);
    } else {
      // The head alone, most requests: written here, without Relay()'s coroutine.
      beast::buffers_suffix<net::const_buffer> rest(net::buffer(scratch.out));
      ec = WriteNow(up->conn.socket, rest);
      nothing_written = ec && beast::buffer_bytes(rest) == scratch.out.size();
      if (!ec && beast::buffer_bytes(rest) > 0) {
        ec = co_await WriteRest(up->conn, rest, milliseconds(gw.upstream_config.timeout_ms));
      } else {
        // Written in this turn of the event loop, on a connection with nothing unread (a pooled
        // one's last response was read whole): nothing of the answer can be there yet.
        after_request = true;
      }
    }
    if (client_failed) {
      Release(std::move(up), false);
      if (ec == bhttp::error::body_limit) {
        // A chunked body grew past server.max_body_bytes; nothing was sent to the client yet.
        [&] { Reply(ex, scratch, bhttp::status::payload_too_large, ErrorBody("body_too_large", ec.message())); }();
        co_await Write(stream, scratch.out, ex.reply_keep);
      }
      co_return false;  // the client went away mid-body, or sent too much
    }
    reached_upstream = true;
    if (!ec) ec = co_await ReadHead(up->conn, up->buffer, milliseconds(gw.upstream_config.timeout_ms), after_request,
                                     &head_size);
    if (!ec) break;
    Release(std::move(up), false);
    if (!(pooled && !request_has_body && ec != beast::error::timeout && (IsIdempotent(req.method) || nothing_written))) {
      break;
    }
    gw.upstream_retries.fetch_add(1, std::memory_order_relaxed);
  }
  if (up && !ec) {
    if (ParseSimpleHead(View(up->buffer).substr(0, head_size), is_head, scratch.upstream_head)) {
      simple = &scratch.upstream_head;
    }
    // Interim responses (1xx) are dropped: the client gets the final one.
    while (!simple && !ec && (!rp || rp->get().result_int() / 100 == 1)) {
      rp = std::make_unique<bhttp::response_parser<bhttp::buffer_body>>();
      rp->header_limit(kMaxUpstreamHead);
      rp->body_limit(boost::none);
      if (is_head) rp->skip(true);
      up->conn.ExpiresAfter(milliseconds(gw.upstream_config.timeout_ms));
      auto [rec, rn] = co_await bhttp::async_read_header(up->conn.socket, up->buffer, *rp, kTuple);
      ec = up->conn.Check(rec);
    }
    if (ec) Release(std::move(up), false);
  }
  if (busy) {
    [&] {  // in a lambda: its temporaries stay out of the coroutine's frame
      gw.upstream_busy.fetch_add(1, std::memory_order_relaxed);
      scratch.rate_headers.Add("Retry-After", 1);
      Reply(ex, scratch, bhttp::status::service_unavailable,
            ErrorBody("upstream_busy", "every upstream connection is busy; try again"), scratch.rate_headers.Rendered());
    }();
    co_return co_await Write(stream, scratch.out, ex.reply_keep);
  }
  if (!up || ec) {
    const bool timeout = ec == beast::error::timeout;
    const char* kind = timeout ? "timeout" : reached_upstream ? "protocol" : "connect";
    [&] {  // in a lambda: its temporaries stay out of the coroutine's frame
      gw.metrics.Counter("tollgate_upstream_errors_total", std::string("kind=\"") + kind + "\"")
          .fetch_add(1, std::memory_order_relaxed);
      Reply(ex, scratch, timeout ? bhttp::status::gateway_timeout : bhttp::status::bad_gateway,
            ErrorBody(timeout ? "upstream_timeout" : "upstream_unavailable",
                      ec ? ec.message() : "no upstream connection"),
            scratch.rate_headers.Rendered());
    }();
    co_return co_await Write(stream, scratch.out, ex.reply_keep);
  }
  gw.upstream_latency.Observe(SecondsSince(t_up));

  // The response's head, with our rate-limit headers in place of any of the same name, and
  // framing for the body we send: the upstream's length, else chunked (HTTP/1.0 clients: the
  // body runs to the connection's close).
  const auto skip = [&scratch](std::string_view name) { return scratch.rate_headers.Has(name); };
  const unsigned status = simple ? simple->status : rp->get().result_int();
  const bool upstream_keep_alive = simple ? simple->keep_alive : rp->get().keep_alive();
  std::optional<uint64_t> length = simple ? simple->content_length : std::nullopt;
  if (!simple && rp->content_length()) length = *rp->content_length();
  const bool unframed = !simple && !length && !rp->is_done();
  const bool response_chunked = unframed && req.version >= 11;
  const bool keep = ex.client_keep_alive && ex.RequestRead() && !gw.draining.load() &&
                    !(unframed && !response_chunked);
  ex.log.upstream_status = static_cast<int>(status);
  scratch.out.clear();
  // In a lambda, as the forwarded head above.
  [&] {
    util::StringAppender head(scratch.out);
    head << "HTTP/1.1 " << status << " " << (simple ? simple->reason : std::string_view(rp->get().reason()))
         << "\r\n";
    if (simple) {
      for (size_t i = 0; i < simple->line_count; ++i) {
        const SimpleHead::Line& l = simple->lines[i];
        if (!skip(l.text.substr(0, l.name_size))) head << l.text << "\r\n";
      }
    } else {
      AppendEndToEnd(rp->get(), head, skip);
    }
    head << scratch.rate_headers.Rendered();
    if (length) {
      head << "Content-Length: " << *length << "\r\n";
    } else if (response_chunked) {
      head << "Transfer-Encoding: chunked\r\n";
    }
    if (!keep) {
      head << "Connection: close\r\n";
    } else if (req.version < 11) {
      head << "Connection: keep-alive\r\n";
    }
    head << "\r\n";
  }();
  bool upstream_failed = false;
  if (simple) {
    up->buffer.consume(simple->size);
    ec = co_await RelayLength(up->conn, up->buffer, stream, scratch.out, is_head ? 0 : length.value_or(0),
                              milliseconds(gw.upstream_config.timeout_ms), &upstream_failed);
  } else {
    ec = co_await Relay(*rp, up->conn, up->buffer, stream, scratch.out, response_chunked,
                        milliseconds(gw.upstream_config.timeout_ms), &upstream_failed);
  }
  Finish(ex, scratch, ex.log.upstream_status);
  // Bytes past the response would be read as the next one's: such a connection is not reused.
  // Nor is one that carried a body with a method that gives a body no meaning (GET, HEAD,
  // DELETE, OPTIONS, TRACE: RFC 9110 9.3): an upstream that ignores it may read it as another
  // request and answer that later, after the connection went back to the pool (issue 18).
  const bool ignorable_body = request_has_body && IsIdempotent(req.method) && req.method != "PUT";
  const bool reusable = !ec && upstream_keep_alive && (simple || rp->is_done()) && up->buffer.size() == 0 &&
                        !ignorable_body;
  Release(std::move(up), reusable);
  co_return !ec && keep;
}

// ---------------------------------------------------------------------------------------------

Gateway::Impl::Impl(std::string path, config::Config config)
    : config_path(std::move(path)),
      server(WithFileLimit(config)),
      upstream_config(config.upstream),
      upstream(ParseUpstream(config.upstream.url)),
      upstream_host(config.upstream.url.substr(7, config.upstream.url.find('/', 7) - 7)),
      decision(config.decision) {
  const config::StoreConfig& sc = config.store;
  store::Store* store = nullptr;
  if (sc.type == "redis") {
    auto r = store::RedisStore::Create({.url = sc.url,
                                        .prefix = sc.prefix,
                                        .timeout_ms = sc.timeout_ms,
                                        .connect_timeout_ms = sc.connect_timeout_ms,
                                        .tls_ca_file = sc.tls_ca_file,
                                        .tls_cert_file = sc.tls_cert_file,
                                        .tls_key_file = sc.tls_key_file});
    if (!r) throw std::runtime_error(r.error());
    redis = std::move(r).value();
    store = redis.get();
    if (sc.deny_cache) {
      deny_cache = std::make_unique<engine::DenyCache>(*redis);
      store = deny_cache.get();
    }
    usage_backend = std::make_unique<store::RedisUsageBackend>(*redis, sc.prefix);
  } else {
    memory = std::make_unique<store::MemoryStore>(store::MemoryStoreOptions{.max_keys = sc.max_keys});
    store = memory.get();
    usage_backend = std::make_unique<store::MemoryUsageBackend>();
  }
  engine = std::make_unique<engine::Engine>(*store);
  meter = std::make_unique<engine::UsageMeter>(*usage_backend, kUsageSlices);

  // The key source may report changes as soon as it starts: they wait for this lock until the
  // first policy is in place.
  std::unique_lock startup(reload_mu);
  if (config.key_source.source == "postgres") {
    auto source = policy::PostgresKeySource::Start(
        {.url = config.key_source.url,
         .plans = config.plans,
         .snapshot_path = config.key_source.snapshot,
         .resync_seconds = config.key_source.resync_seconds},
        [this](std::vector<config::KeyConfig> keys) {
          // A key inserted, changed or revoked: a new policy with the same configuration.
          std::lock_guard lock(reload_mu);
          config::Config c = file_config;
          c.keys = std::move(keys);
          (void)Install(std::move(c));
        },
        [this](const std::string& line) { log.Error(line); });
    if (!source) throw std::runtime_error(source.error());
    key_source = std::move(source).value();
    config.keys = key_source->Keys();
  }
  file_config = config;
  auto built = policy::Policy::Build(std::move(config));
  if (!built) throw std::runtime_error(built.error());
  policy = *built;
  startup.unlock();

  for (size_t i = 0; i < requests_by_class.size(); ++i) {
    requests_by_class[i] = &metrics.Counter("tollgate_requests_total", "class=\"" + std::to_string(i + 2) + "xx\"");
  }
  metrics.Gauge("tollgate_connections", "Open client connections.",
                [this] { return static_cast<double>(connections.load()); });
  if (memory) {
    metrics.Gauge("tollgate_store_keys", "Keys held by the memory store.",
                  [this] { return static_cast<double>(memory->size()); });
    metrics.Gauge("tollgate_store_evictions_total", "Live keys evicted from the full memory store.",
                  [this] { return static_cast<double>(memory->stats().evicted_live.load()); });
    metrics.Gauge("tollgate_store_full_rejections_total",
                  "New identities rejected because the memory store was full of state that still restricts a client.",
                  [this] { return static_cast<double>(memory->stats().full_rejections.load()); });
  }
  if (redis) {
    const auto& st = redis->stats();
    metrics.Gauge("tollgate_redis_calls_total", "Decisions sent to Redis.", [&st] { return static_cast<double>(st.calls.load()); });
    metrics.Gauge("tollgate_redis_scripts_total", "Script calls sent to Redis for those decisions (a group of them is one).",
                  [&st] { return static_cast<double>(st.scripts.load()); });
    metrics.Gauge("tollgate_redis_command_errors_total", "Usage-count commands that failed (sent again if Redis never got them, else lost).",
                  [&st] { return static_cast<double>(st.command_errors.load()); });
    metrics.Gauge("tollgate_redis_timeouts_total", "Redis calls past their deadline.", [&st] { return static_cast<double>(st.timeouts.load()); });
    metrics.Gauge("tollgate_redis_errors_total", "Redis connection and protocol failures.", [&st] { return static_cast<double>(st.errors.load()); });
    metrics.Gauge("tollgate_redis_breaker_rejections_total", "Calls failed at once: circuit open.", [&st] { return static_cast<double>(st.breaker_rejections.load()); });
    metrics.Gauge("tollgate_redis_breaker_open", "1 while the circuit breaker is open.", [&st] { return static_cast<double>(st.breaker_open.load()); });
    metrics.Gauge("tollgate_redis_noscript_total", "Script reloads after NOSCRIPT.", [&st] { return static_cast<double>(st.noscript.load()); });
    metrics.Gauge("tollgate_redis_redirects_total", "Redis Cluster MOVED/ASK redirects followed.", [&st] { return static_cast<double>(st.redirects.load()); });
    metrics.Gauge("tollgate_redis_reconnects_total", "Redis connections lost and reopened.", [&st] { return static_cast<double>(st.reconnects.load()); });
  }
  if (deny_cache) {
    metrics.Gauge("tollgate_deny_cache_rejections_total", "Requests rejected locally by the exact deny cache.",
                  [this] { return static_cast<double>(deny_cache->stats().local_rejections.load()); });
  }
  if (key_source) {
    const auto& ks = key_source->stats();
    metrics.Gauge("tollgate_keys_loads_total", "Full key loads from PostgreSQL.", [&ks] { return static_cast<double>(ks.loads.load()); });
    metrics.Gauge("tollgate_keys_notifications_total", "Key changes notified by PostgreSQL.", [&ks] { return static_cast<double>(ks.notifications.load()); });
    metrics.Gauge("tollgate_keys_errors_total", "Key source failures (PostgreSQL down, bad queries).", [&ks] { return static_cast<double>(ks.errors.load()); });
    metrics.Gauge("tollgate_keys_skipped_rows_total", "Malformed api_keys rows skipped.", [&ks] { return static_cast<double>(ks.skipped_rows.load()); });
    metrics.Gauge("tollgate_keys_source_connected", "1 while connected to PostgreSQL.", [&ks] { return ks.connected.load() ? 1.0 : 0.0; });
  }
}

Gateway::Impl::~Impl() {
  key_source.reset();  // stops calling Install()
#ifdef TOLLGATE_HAVE_RLS
  if (rls) rls->Shutdown();
#endif
  // The workers' lanes hold sockets of the workers' loops, which go before the store.
  if (redis) redis->CloseLanes();
}

void Gateway::Impl::LogStoreFailure(store::StoreErrc errc) {
  const int64_t now_s = util::SystemClock::Instance().Now().unix_micros() / 1'000'000;
  int64_t last = last_store_log_s.load(std::memory_order_relaxed);
  if (now_s <= last || !last_store_log_s.compare_exchange_strong(last, now_s)) return;
  const char* what = errc == store::StoreErrc::kTimeout ? "timeout" : errc == store::StoreErrc::kProtocol ? "protocol" : "unavailable";
  log.Error(std::string("{\"level\":\"warn\",\"msg\":\"store failed; routes follow their fail_mode\",\"error\":\"") +
            what + "\",\"degraded_total\":" + std::to_string(engine->stats().degraded.load()) +
            ",\"unavailable_total\":" + std::to_string(engine->stats().unavailable.load()) +
            (redis ? ",\"last_connection_error\":\"" + JsonEscape(redis->LastError()) + "\"" : std::string()) + "}");
}

core::Result<bool> Gateway::Impl::Install(config::Config config) {
  auto built = policy::Policy::Build(std::move(config));
  if (!built) return core::Error{built.error()};
  {
    std::lock_guard lock(policy_mu);
    policy = *built;
  }
  generation.fetch_add(1, std::memory_order_release);
  return true;
}

core::Result<bool> Gateway::Impl::Reload() {
  std::lock_guard lock(reload_mu);
  auto config = config::LoadConfigFile(config_path);
  core::Result<bool> installed = core::Error{config ? "" : config.error()};
  if (config) {
    if (key_source) {
      if (config->key_source.source != "postgres") {
        installed = core::Error{"keys: the key source cannot change on reload (restart instead)"};
      } else {
        key_source->SetPlans(config->plans);
        config->keys = key_source->Keys();
      }
    }
    if (installed.ok() || installed.error().empty()) {
      config::Config copy = *config;
      installed = Install(std::move(config).value());
      if (installed) file_config = std::move(copy);
    }
  }
  if (!installed) {
    metrics.Counter("tollgate_config_reloads_total", "result=\"error\"").fetch_add(1);
    log.Error("{\"level\":\"error\",\"msg\":\"reload refused; the previous configuration keeps serving\",\"error\":\"" +
              JsonEscape(installed.error()) + "\"}");
    return installed;
  }
  metrics.Counter("tollgate_config_reloads_total", "result=\"ok\"").fetch_add(1);
  log.Error("{\"level\":\"info\",\"msg\":\"configuration reloaded\"}");
  return true;
}

Gateway::Gateway(std::string config_path, config::Config config)
    : impl_(std::make_unique<Impl>(std::move(config_path), config)) {
  Impl& g = *impl_;
  size_t threads = g.server.threads > 0 ? static_cast<size_t>(g.server.threads)
                                        : std::max(1u, std::thread::hardware_concurrency());
  const Endpoint listen = SplitHostPort(g.server.listen, "server.listen");
  const Endpoint admin = SplitHostPort(g.server.admin_listen, "server.admin_listen");
  auto open = [](net::io_context& ioc, const Endpoint& ep, bool reuse_port) {
    tcp::resolver resolver(ioc);
    const auto results = resolver.resolve(ep.host, ep.port);
    const tcp::endpoint endpoint = *results.begin();
    tcp::acceptor a(ioc);
    a.open(endpoint.protocol());
    a.set_option(net::socket_base::reuse_address(true));
    if (reuse_port) {
      // Every worker listens on the same port; the kernel spreads connections across them.
      const int one = 1;
      ::setsockopt(a.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    }
    a.bind(endpoint);
    a.listen(net::socket_base::max_listen_connections);
    return a;
  };
  for (size_t i = 0; i < threads; ++i) g.workers.push_back(std::make_unique<Worker>(g, i));
  auto sum = [&g](auto field) {
    return [&g, field] {
      size_t n = 0;
      for (const auto& w : g.workers) n += ((*w).*field).load(std::memory_order_relaxed);
      return static_cast<double>(n);
    };
  };
  g.metrics.Gauge("tollgate_upstream_pool_per_worker",
                  "Upstream connections each worker thread may open (upstream.max_connections / threads).",
                  [&g] { return static_cast<double>(std::max<size_t>(1, g.upstream_config.max_connections / g.workers.size())); });
  g.metrics.Gauge("tollgate_upstream_connections", "Open upstream connections, idle and busy, all workers.",
                  sum(&Worker::upstream_open));
  g.metrics.Gauge("tollgate_upstream_queue_waiting", "Requests waiting for an upstream connection.",
                  sum(&Worker::pool_waiting));
  g.metrics.Gauge("tollgate_max_connections", "Client connections allowed (server.max_connections, after the file limit).",
                  [&g] { return static_cast<double>(g.server.max_connections); });
  // Each worker talks to Redis from its own loop: a decision never changes threads.
  if (g.redis) {
    for (auto& w : g.workers) w->redis_lane = g.redis->AddLane(w->ioc);
  }
  try {
    for (auto& w : g.workers) w->acceptor.emplace(open(w->ioc, listen, true));
    g.workers[0]->admin.emplace(open(g.workers[0]->ioc, admin, false));
    if (!config.decision.listen.empty()) {
      const Endpoint d = SplitHostPort(config.decision.listen, "decision.listen");
      g.workers[0]->decision.emplace(open(g.workers[0]->ioc, d, false));
    }
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error(std::string("cannot listen: ") + e.what());
  }
  if (!config.rls.listen.empty()) {
#ifdef TOLLGATE_HAVE_RLS
    rls::RlsOptions options{.listen = config.rls.listen};
    for (const auto& d : config.rls.domains) options.domains.push_back({d.domain, d.key_entry, d.ip_entry});
    g.rls = std::make_unique<rls::RlsServer>(std::move(options), *g.engine,
                                             [&g] { return g.CurrentPolicy(); });
    auto port = g.rls->Start();
    if (!port) throw std::runtime_error(port.error());
    const auto& st = g.rls->stats();
    g.metrics.Gauge("tollgate_rls_ok_total", "Envoy RLS answers OK.", [&st] { return static_cast<double>(st.ok.load()); });
    g.metrics.Gauge("tollgate_rls_over_limit_total", "Envoy RLS answers OVER_LIMIT.", [&st] { return static_cast<double>(st.over_limit.load()); });
    g.metrics.Gauge("tollgate_rls_unknown_domain_total", "Envoy RLS calls for a domain not configured.", [&st] { return static_cast<double>(st.unknown_domain.load()); });
    g.metrics.Gauge("tollgate_rls_unknown_key_total", "Envoy RLS descriptors with an unknown API key.", [&st] { return static_cast<double>(st.unknown_key.load()); });
#else
    throw std::runtime_error("rls.listen: this build has no gRPC (configure with TOLLGATE_RLS=ON)");
#endif
  }
}

Gateway::~Gateway() = default;

int Gateway::Run() {
  Impl& g = *impl_;
  for (auto& w : g.workers) {
    net::co_spawn(w->ioc, w->Accept(*w->acceptor, Listener::kGateway), net::detached);
    net::co_spawn(w->ioc, w->SweepDeadlines(), net::detached);
    if (w->admin) net::co_spawn(w->ioc, w->Accept(*w->admin, Listener::kAdmin), net::detached);
    if (w->decision) net::co_spawn(w->ioc, w->Accept(*w->decision, Listener::kDecision), net::detached);
    w->thread = std::thread([&g, &w] {
      if (g.redis) g.redis->EnterLane(w->redis_lane);
      auto guard = net::make_work_guard(w->ioc);
      w->ioc.run();
    });
  }
  g.log.Error("{\"level\":\"info\",\"msg\":\"listening\",\"listen\":\"" + g.server.listen +
              "\",\"admin\":\"" + g.server.admin_listen + "\",\"threads\":" +
              std::to_string(g.workers.size()) + "}");

  net::io_context main_ioc{1};
  net::signal_set signals(main_ioc, SIGTERM, SIGINT, SIGHUP);
  net::steady_timer ticker(main_ioc);
  bool stopping = false;
  Clock::time_point drain_deadline;

  std::function<void()> wait_signal = [&] {
    signals.async_wait([&](const beast::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGHUP) {
        (void)g.Reload();
        wait_signal();
        return;
      }
      // SIGTERM / SIGINT: stop accepting, let in-flight requests finish, then exit.
      stopping = true;
      g.draining.store(true);
      drain_deadline = Clock::now() + milliseconds(g.server.drain_timeout_ms);
      for (auto& w : g.workers) {
        net::post(w->ioc, [&w] {
          beast::error_code ignored;
          if (w->acceptor) w->acceptor->close(ignored);
          if (w->admin) w->admin->close(ignored);
          if (w->decision) w->decision->close(ignored);
        });
      }
      g.log.Error("{\"level\":\"info\",\"msg\":\"draining\"}");
    });
  };
  wait_signal();
  std::function<void()> tick = [&] {
    ticker.expires_after(milliseconds(stopping ? 20 : 100));
    ticker.async_wait([&](const beast::error_code& ec) {
      if (ec) return;
      g.log.Flush();
      if (stopping && (g.in_flight.load() == 0 || Clock::now() >= drain_deadline)) {
        signals.cancel();
        return;
      }
      static int ticks = 0;
      ++ticks;
      // Usage goes to Redis within a second (replicas and restarts see it). The memory backend
      // is read only through the meter, which flushes first, so its counts move every 10 s: a
      // row per active key per flush showed in profiles with many keys.
      if (!g.memory) {
        g.meter->Flush(ticks % Impl::kUsageSlices);
      } else if (ticks % 10 == 0) {
        g.meter->Flush(ticks / 10 % Impl::kUsageSlices);
      }
      if (g.memory && ticks % 100 == 0) g.memory->Sweep(util::SystemClock::Instance().Now());
      tick();
    });
  };
  tick();
  main_ioc.run();
  for (auto& w : g.workers) w->ioc.stop();
  for (auto& w : g.workers) w->thread.join();
  // Usage counted until the last request reaches its backend (Redis drains when destroyed).
  g.meter->Flush();
  g.log.Flush();
  g.log.Error("{\"level\":\"info\",\"msg\":\"stopped\"}");
  return 0;
}

}  // namespace tollgate::http
