#include <tollgate/http/gateway.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
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
#include <tuple>
#include <type_traits>
#include <unordered_map>
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
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <tollgate/contract/contract.hpp>
#include <tollgate/core/calendar.hpp>
#include <tollgate/engine/checks.hpp>
#include <tollgate/engine/engine.hpp>
#include <tollgate/http/request_head.hpp>
#include <tollgate/metrics/metrics.hpp>
#include <tollgate/policy/policy.hpp>
#include <tollgate/usage/meter.hpp>
#include <tollgate/util/clock.hpp>
#include <tollgate/util/hash.hpp>
#include <tollgate/util/query.hpp>
#include <tollgate/util/target.hpp>
#include <tollgate/util/text.hpp>

#include <sys/resource.h>
#include <sys/socket.h>

#include <deque>

#include "socket.hpp"

// GCC 12 inlines Asio's recycling allocator for coroutine frames (aligned_alloc, released with
// free through aligned_delete) and then reports the pair as mismatched: a false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <tollgate/util/host_port.hpp>

#include "health_check.hpp"
#include "worker.hpp"

namespace tollgate::http {

namespace {

// At the drain's end, the most the tunnels being closed are waited for.
constexpr milliseconds kTunnelsCloseTime{1000};

Endpoint SplitHostPort(const std::string& s, const char* what) {
  auto hp = util::SplitHostPort(s);
  if (!hp) throw std::runtime_error(std::string(what) + ": expected host:port, got '" + s + "'");
  return {std::move(hp->host), std::move(hp->port)};
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
  const size_t threads = config.server.threads > 0
                             ? static_cast<size_t>(config.server.threads)
                             : std::max(1u, std::thread::hardware_concurrency());
  size_t upstream_connections = 0;
  for (const config::UpstreamGroupConfig& g : config.upstreams) {
    for (const config::UpstreamConfig& e : g.endpoints) upstream_connections += e.max_connections;
  }
  const size_t reserve =
      upstream_connections + config.server.admin_max_connections + 64 + 4 * threads;
  const size_t files = lim.rlim_cur == RLIM_INFINITY ? SIZE_MAX : static_cast<size_t>(lim.rlim_cur);
  const size_t fit = files > reserve + 16 ? files - reserve : 16;
  const size_t wanted =
      server.max_connections == 0 ? std::min<size_t>(10'000, fit) : server.max_connections;
  if (wanted > fit) {
    std::fprintf(
        stderr,
        "{\"level\":\"warn\",\"msg\":\"server.max_connections lowered to fit the file limit\","
        "\"configured\":%zu,\"max_connections\":%zu,\"nofile\":%zu}\n",
        wanted, fit, files);
  }
  server.max_connections = std::min(wanted, fit);
  return server;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Gateway::Impl::Impl(std::string path, config::Config config, std::string_view config_text,
                    GatewayServices services)
    : config_path(std::move(path)),
      server(WithFileLimit(config)),
      policies(services.policy),
      decision(config.decision),
      metrics(services.metrics),
      engine(&services.engine),
      store(services.store),
      replicas(services.replicas),
      meter(&services.meter) {
  // The key source may report changes as soon as it starts: they wait for this lock until the
  // first policy is in place.
  std::unique_lock startup(reload_mu);
  if (services.start_keys) config.keys = StartKeySource(services.start_keys);
  file_config = config;
  if (auto installed = Install(std::move(config)); !installed) {
    throw std::runtime_error(installed.error());
  }
  startup.unlock();
  live.SetConfig(config_text);
  RegisterMetrics();
  CheckStore();  // the memory store is ready at once; Redis when its PING is answered
}

std::vector<config::KeyConfig> Gateway::Impl::StartKeySource(
    const decltype(GatewayServices::start_keys)& start_keys) {
  auto source = start_keys(
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
  return key_source->Keys();
}

void Gateway::Impl::RegisterMetrics() {
  for (size_t i = 0; i < requests_by_class.size(); ++i) {
    requests_by_class[i] =
        &metrics.Counter("tollgate_requests_total", "class=\"" + std::to_string(i + 2) + "xx\"");
  }
  metrics.Gauge("tollgate_held_requests",
                "Requests held now by smoothing (on_limit: delay), waiting for their slot.",
                metrics::ReadOf(holding));
  metrics.Gauge("tollgate_connections", "Open client connections.",
                [this] { return static_cast<double>(connections.OpenApprox()); });
  metrics.Gauge("tollgate_keys_unknown_plan",
                "Keys whose plan does not exist (they get the strictest plan).",
                metrics::ReadOf(policies.unknown_plan_keys()));
  // Each component declares its own (the store's: app/).
  if (key_source) key_source->ExportMetrics(metrics);
}

Gateway::Impl::~Impl() {
  key_source.reset();  // stops calling Install()
  // The workers' lanes hold sockets of the workers' loops, which go before the store.
  store.CloseLanes();
}

void Gateway::Impl::LogStoreFailure(store::StoreErrc errc) {
  const int64_t now_s = util::SystemClock::Instance().Now().unix_micros() / 1'000'000;
  int64_t last = last_store_log_s.load(std::memory_order_relaxed);
  if (now_s <= last || !last_store_log_s.compare_exchange_strong(last, now_s)) return;
  const char* what = errc == store::StoreErrc::kTimeout    ? "timeout"
                     : errc == store::StoreErrc::kProtocol ? "protocol"
                                                           : "unavailable";
  const store::StoreStatus status = store.Status();
  log.Error(std::string("{\"level\":\"warn\",\"msg\":\"store failed; routes follow their "
                        "fail_mode\",\"error\":\"") +
            what + "\",\"degraded_total\":" + std::to_string(engine->stats().degraded.load()) +
            ",\"unavailable_total\":" + std::to_string(engine->stats().unavailable.load()) +
            (util::ValueOf(config::kStoreTypeNames, status.type) == config::StoreType::kRedis
                 ? ",\"last_connection_error\":\"" + JsonEscape(status.last_error) + "\""
                 : std::string()) +
            "}");
}

core::Result<bool> Gateway::Impl::Install(config::Config config) {
  // Routes name groups by their index: a reload may not add, remove or reorder them. The pools
  // are built from the groups at start: a changed endpoint or setting waits for a restart, as
  // the rest of `upstream` and `server` do, and the log says so.
  // (A configuration built in code, without upstreams, has the default group alone.)
  const size_t n = std::max<size_t>(1, config.upstreams.size());
  bool same = groups.empty() || groups.size() == n;
  bool settings = true;
  for (size_t i = 0; same && !groups.empty() && i < n; ++i) {
    same = groups[i]->config.name ==
           (config.upstreams.empty() ? config::kDefaultUpstream : config.upstreams[i].name);
    settings = settings && (config.upstreams.empty() || groups[i]->config == config.upstreams[i]);
  }
  if (!same) return core::Error{"upstreams: the groups changed; restart to change them"};
  if (!settings) {
    log.Error(
        "{\"level\":\"warning\",\"msg\":\"upstreams: changed endpoints or settings of a group "
        "apply at the next restart; the running ones stay\"}");
  }
  return policies.Install(std::move(config), [this](size_t keys, const config::KeyConfig& first) {
    NoteUnknownPlans(keys, first);
  });
}

// Issue 31: keys of a plan that does not exist get the strictest plan (counted by the holder).
void Gateway::Impl::NoteUnknownPlans(size_t keys, const config::KeyConfig& first) {
  log.Error(
      "{\"level\":\"warning\",\"msg\":\"keys name a plan that does not exist: they get "
      "the strictest plan\",\"keys\":" +
      std::to_string(keys) + ",\"first_key_id\":\"" + util::JsonEscape(first.id) +
      "\",\"plan\":\"" + util::JsonEscape(first.plan) + "\"}");
}

void Gateway::Impl::Tick() {
  ++ticks;
  if (ticks % 10 == 0) CheckStore();
  if (ticks % 10 == 5) SyncDeny();
  if (ticks % 10 == 7 && replicas) replicas->Beat();
  // Usage goes to a shared store within a second (replicas and restarts see it). The memory
  // backend is read only through the meter, which flushes first, so its counts move every
  // 10 s: a row per active key per flush showed in profiles with many keys.
  if (replicas) {
    meter->Flush(ticks % meter->slices());
  } else if (ticks % 10 == 0) {
    meter->Flush(ticks / 10 % meter->slices());
  }
  store.Tick(util::SystemClock::Instance().Now());
  const Clock::time_point now = Clock::now();
  for (ListenerTls* tls : {gateway_tls.get(), admin_tls.get()}) {
    if (tls) tls->Tick(now);
  }
}

void Gateway::Impl::CloseListeners() {
  draining.store(true);
  for (auto& w : workers) {
    net::post(w->ioc, [&w] {
      beast::error_code ignored;
      if (w->acceptor) w->acceptor->close(ignored);
      if (w->admin) w->admin->close(ignored);
      if (w->decision) w->decision->close(ignored);
    });
  }
  log.Error("{\"level\":\"info\",\"msg\":\"draining\"}");
}

void Gateway::Impl::CloseTunnels() {
  for (auto& w : workers) net::post(w->ioc, [&w] { w->tunnels.CloseAll(); });
}

bool Gateway::Impl::DrainEnded(Clock::time_point drain_deadline) {
  const Clock::time_point now = Clock::now();
  if (in_flight.load() > 0 && now < drain_deadline) return false;
  // The tunnels are closed then (they are not in flight), and given a moment to go.
  if (!tunnels_closing) {
    tunnels_closing = true;
    tunnels_deadline = now + kTunnelsCloseTime;
    CloseTunnels();
  }
  return OpenTunnels() == 0 || now >= tunnels_deadline;
}

size_t Gateway::Impl::OpenTunnels() const {
  size_t n = 0;
  for (const auto& w : workers) n += w->tunnels.CountApprox();
  return n;
}

void Gateway::Impl::CheckStore() {
  store.CheckReady([this](bool ready) { store_ready.store(ready, std::memory_order_relaxed); });
}

std::string_view Gateway::Impl::Readiness() const {
  if (stopping.load(std::memory_order_relaxed)) return "stopping";
  if (!store_ready.load(std::memory_order_relaxed)) return "store_unavailable";
  return {};
}

void Gateway::Impl::ReloadTls(std::string_view why) {
  for (ListenerTls* tls : {gateway_tls.get(), admin_tls.get()}) {
    if (tls) (void)tls->Reload(why);
  }
}

core::Result<bool> Gateway::Impl::Reload() {
  // The certificates first, each listener's refusal on its own (logged and counted): they are
  // not the configuration, whose result this is.
  ReloadTls("reload");
  std::lock_guard lock(reload_mu);
  struct AfterReload {
    const std::function<void()>& hook;
    ~AfterReload() {
      if (hook) hook();
    }
  } after{on_reload};
  std::string text;
  auto config = config::LoadConfigFile(config_path, &text);
  core::Result<bool> installed = core::Error{config ? "" : config.error()};
  if (config) {
    if (key_source) {
      if (config->key_source.source != config::KeySourceType::kPostgres) {
        installed = core::Error{"keys: the key source cannot change on reload (restart instead)"};
      } else {
        key_source->SetPlans(config->plans);
        config->keys = key_source->Keys();
      }
    }
    if (installed.ok() || installed.error().empty()) {
      config::Config copy = *config;
      installed = Install(std::move(config).value());
      if (installed) {
        file_config = std::move(copy);
        live.SetConfig(text);
      }
    }
  }
  if (!installed) {
    metrics.Counter("tollgate_config_reloads_total", "result=\"error\"").fetch_add(1);
    log.Error(
        "{\"level\":\"error\",\"msg\":\"reload refused; the previous configuration keeps "
        "serving\",\"error\":\"" +
        JsonEscape(installed.error()) + "\"}");
    return installed;
  }
  metrics.Counter("tollgate_config_reloads_total", "result=\"ok\"").fetch_add(1);
  log.Error("{\"level\":\"info\",\"msg\":\"configuration reloaded\",\"config_version\":\"" +
            live.Version() + "\"}");
  return true;
}

namespace {
// The TLS of the listeners (issue 33; the upstreams' is their groups'); throws naming the field.
void StartTls(Gateway::Impl& g) {
  // A write to a peer that closed must be an error, not SIGPIPE (OpenSSL writes the socket
  // itself, without MSG_NOSIGNAL).
  std::signal(SIGPIPE, SIG_IGN);
  for (auto [tls, tls_config, field] :
       {std::tuple{&g.gateway_tls, &g.server.tls, "server.tls"},
        std::tuple{&g.admin_tls, &g.server.admin_tls, "server.admin_tls"}}) {
    if (!tls_config->enabled()) continue;
    const std::string_view listener = field == std::string_view("server.tls") ? "gateway" : "admin";
    // HTTP/2 is the gateway listener's (issue 34); the admin listener speaks HTTP/1.1.
    std::vector<std::string> alpn = {"http/1.1"};
    if (listener == "gateway" && g.server.http2.enabled) alpn.insert(alpn.begin(), "h2");
    auto made =
        ListenerTls::Create(*tls_config, std::string(listener), g.metrics, g.log, std::move(alpn));
    if (!made) throw std::runtime_error(std::string(field) + ": " + made.error());
    *tls = std::move(made).value();
  }
}

// Active health checks (issue 33) on the first worker's loop, through its pools.
void StartHealthChecks(Gateway::Impl& g) {
  for (const auto& group : g.groups) {
    if (!group->config.active.enabled()) continue;
    Worker& w = *g.workers.front();
    for (size_t i = 0; i < group->endpoints.size(); ++i) {
      net::co_spawn(w.ioc, CheckHealth(*w.pools[group->first_pool + i], *group, i, g.log),
                    net::detached);
    }
  }
}
}  // namespace

Gateway::Gateway(std::string config_path, config::Config config, std::string_view config_text,
                 GatewayServices services)
    : impl_(std::make_unique<Impl>(std::move(config_path), config, config_text,
                                   std::move(services))) {
  Impl& g = *impl_;
  StartTls(g);
  g.groups =
      BuildUpstreamGroups(config, g.metrics, [&g](const std::string& line) { g.log.Error(line); });
  g.admin_endpoints["POST /admin/reset"] = [&g](std::string body, AdminReply reply) {
    g.Reset(std::move(body), std::move(reply));
  };
  g.admin_endpoints["GET /admin/explain"] = [&g](std::string query, AdminReply reply) {
    g.Explain(std::move(query), std::move(reply));
  };
  g.admin_endpoints["GET /admin/ui/data"] = [&g](std::string query, AdminReply reply) {
    UiData(g, std::move(query), std::move(reply));
  };
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
  for (size_t i = 0; i < threads; ++i) {
    g.workers.push_back(std::make_unique<Worker>(g, i, threads));
  }
  auto sum = [&g](size_t (UpstreamPool::*read)() const) {
    return [&g, read] {
      size_t n = 0;
      for (const auto& w : g.workers) {
        for (const auto& pool : w->pools) n += (*pool.*read)();
      }
      return static_cast<double>(n);
    };
  };
  g.metrics.Gauge(
      "tollgate_upstream_pool_per_worker",
      "Upstream connections each worker thread may open to the default group's first endpoint "
      "(its max_connections / threads).",
      [&g] { return static_cast<double>(g.workers.front()->pools.front()->shares().connections); });
  g.metrics.Gauge("tollgate_upstream_connections",
                  "Open upstream connections, idle and busy, all workers.",
                  sum(&UpstreamPool::OpenApprox));
  g.metrics.Gauge("tollgate_upstream_queue_waiting", "Requests waiting for an upstream connection.",
                  sum(&UpstreamPool::WaitingApprox));
  g.metrics.Gauge("tollgate_upgraded_connections",
                  "Upgraded connections (tunnels) open now, all workers.",
                  [&g] { return static_cast<double>(g.OpenTunnels()); });
  g.metrics.Gauge("tollgate_max_connections",
                  "Client connections allowed (server.max_connections, after the file limit).",
                  [&g] { return static_cast<double>(g.server.max_connections); });
  // Each worker talks to the store (Redis) from its own loop: a decision never changes threads.
  for (auto& w : g.workers) w->store_lane = g.store.AddLane(w->ioc);
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
  StartHealthChecks(g);  // they run with the loops (Run)
}

Gateway::~Gateway() = default;

std::shared_ptr<const policy::DenyList> Gateway::RuntimeDeny() { return impl_->RuntimeDeny(); }

void Gateway::OnDrain(std::function<void()> hook) { impl_->on_drain = std::move(hook); }
void Gateway::OnReload(std::function<void()> hook) { impl_->on_reload = std::move(hook); }
void Gateway::AddAdminEndpoint(std::string path, AdminHandler handler) {
  impl_->admin_endpoints["POST " + path] = std::move(handler);
}

int Gateway::Run() {
  Impl& g = *impl_;
  for (auto& w : g.workers) {
    net::co_spawn(w->ioc, w->Accept(*w->acceptor, Listener::kGateway), net::detached);
    net::co_spawn(w->ioc, w->SweepDeadlines(), net::detached);
    if (w->admin) net::co_spawn(w->ioc, w->Accept(*w->admin, Listener::kAdmin), net::detached);
    if (w->decision)
      net::co_spawn(w->ioc, w->Accept(*w->decision, Listener::kDecision), net::detached);
    w->thread = std::thread([&g, &w] {
      g.store.EnterLane(w->store_lane);
      auto guard = net::make_work_guard(w->ioc);
      w->ioc.run();
    });
  }
  g.log.Error("{\"level\":\"info\",\"msg\":\"listening\",\"listen\":\"" + g.server.listen +
              "\",\"admin\":\"" + g.server.admin_listen + "\",\"config_version\":\"" +
              g.live.Version() + "\",\"threads\":" + std::to_string(g.workers.size()) + "}");

  net::io_context main_ioc{1};
  net::signal_set signals(main_ioc, SIGTERM, SIGINT, SIGHUP);
  net::steady_timer ticker(main_ioc), delay(main_ioc);
  bool stopping = false;  // draining: the listeners are closed
  Clock::time_point drain_deadline;
  // Stop accepting, let in-flight requests finish (the ticker below), then exit.
  auto drain = [&] {
    if (stopping) return;
    stopping = true;
    drain_deadline = Clock::now() + milliseconds(g.server.drain_timeout_ms);
    g.CloseListeners();
  };
  std::function<void()> wait_signal = [&] {
    signals.async_wait([&](const beast::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGHUP) {
        (void)g.Reload();
        wait_signal();
        return;
      }
      // SIGTERM / SIGINT: /readyz answers 503 at once (and the RLS NOT_SERVING), so that load
      // balancers take this replica out while it still serves for server.shutdown_delay_ms;
      // then the drain. A second signal drains at once.
      if (!g.stopping.exchange(true)) {
        if (g.on_drain) g.on_drain();
        if (g.server.shutdown_delay_ms > 0) {
          g.log.Error("{\"level\":\"info\",\"msg\":\"stopping: not ready, draining in " +
                      std::to_string(g.server.shutdown_delay_ms) + " ms\"}");
          delay.expires_after(milliseconds(g.server.shutdown_delay_ms));
          delay.async_wait([&](const beast::error_code& dec) {
            if (!dec) drain();
          });
          wait_signal();
          return;
        }
      }
      delay.cancel();
      drain();
    });
  };
  wait_signal();
  g.CheckStore();
  std::function<void()> tick = [&] {
    ticker.expires_after(milliseconds(stopping ? 20 : 100));
    ticker.async_wait([&](const beast::error_code& ec) {
      if (ec) return;
      g.log.Flush();
      if (stopping && g.DrainEnded(drain_deadline)) {
        signals.cancel();
        return;
      }
      g.Tick();
      tick();
    });
  };
  tick();
  main_ioc.run();
  for (auto& w : g.workers) w->ioc.stop();
  for (auto& w : g.workers) w->thread.join();
  g.meter->Flush();  // usage counted until the last request (Redis drains when destroyed)
  g.log.Flush();
  g.log.Error("{\"level\":\"info\",\"msg\":\"stopped\"}");
  return 0;
}

}  // namespace tollgate::http
