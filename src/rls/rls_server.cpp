#include <tollgate/rls/rls_server.hpp>
#include <tollgate/util/json_escape.hpp>

#include <sys/stat.h>

#include <dirent.h>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <tollgate/contract/contract.hpp>
#include <tollgate/metrics/metrics.hpp>
#include <tollgate/util/clock.hpp>

#include "rls.grpc.pb.h"
#include "rls/call.hpp"

namespace tollgate::rls {
namespace internal {

DescriptorCounters CountersFor(metrics::Registry& registry, std::string_view domain,
                               std::string_view stat_key) {
  const std::string labels =
      metrics::Label("domain", domain) + "," + metrics::Label("descriptor", stat_key);
  return {&registry.Counter("tollgate_rls_descriptor_hits_total", labels),
          &registry.Counter("tollgate_rls_descriptor_over_limit_total", labels),
          &registry.Counter("tollgate_rls_descriptor_near_limit_total", labels),
          &registry.Counter("tollgate_rls_descriptor_within_limit_total", labels),
          &registry.Counter("tollgate_rls_descriptor_shadow_mode_total", labels)};
}

int64_t CostOf(const pb::RateLimitRequest& request, const pb::RateLimitDescriptor& descriptor) {
  if (descriptor.has_hits_addend())
    return static_cast<int64_t>(std::min<uint64_t>(descriptor.hits_addend().value(), INT32_MAX));
  return request.hits_addend() == 0 ? 1 : std::min<int64_t>(request.hits_addend(), INT32_MAX);
}

void AddResponseHeaders(const contract::HeaderList& headers, pb::RateLimitResponse& response) {
  for (auto& [k, val] : headers.Pairs()) {
    auto* h = response.add_response_headers_to_add();
    h->set_key(k);
    h->set_value(val);
  }
}

// "N per unit" for Envoy's current_limit: the largest unit in which the policy is a whole
// number of requests, or the policy's quota per its window rounded down.
void DescribeLimit(const core::Limit& limit, core::Instant now,
                   pb::RateLimitResponse::RateLimit* out) {
  using Unit = pb::RateLimitResponse::RateLimit;
  struct U {
    int64_t seconds;
    Unit::Unit unit;
  };
  static constexpr U kUnits[] = {
      {1, Unit::SECOND}, {60, Unit::MINUTE}, {3600, Unit::HOUR}, {86'400, Unit::DAY}};
  if (const auto* q = std::get_if<core::Quota>(&limit.impl())) {
    out->set_unit(q->period() == core::Period::kDay ? Unit::DAY : Unit::MONTH);
    out->set_requests_per_unit(
        static_cast<uint32_t>(std::min<int64_t>(limit.PolicyQuota(), UINT32_MAX)));
    return;
  }
  if (const auto* b = std::get_if<core::TokenBucket>(&limit.impl())) {
    // rate = tokens per per_micros: pick the first unit with at least one whole token.
    for (const U& u : kUnits) {
      const __int128 per_unit =
          static_cast<__int128>(b->rate().tokens) * u.seconds * 1'000'000 / b->rate().per_micros;
      if (per_unit >= 1 || u.unit == Unit::DAY) {
        out->set_unit(u.unit);
        out->set_requests_per_unit(static_cast<uint32_t>(std::min<__int128>(per_unit, UINT32_MAX)));
        return;
      }
    }
  }
  const int64_t w = limit.PolicyWindowSeconds(now);
  for (auto it = std::rbegin(kUnits); it != std::rend(kUnits); ++it) {
    if (w % it->seconds == 0) {
      out->set_unit(it->unit);
      out->set_requests_per_unit(static_cast<uint32_t>(
          std::min<int64_t>(limit.PolicyQuota() / (w / it->seconds), UINT32_MAX)));
      return;
    }
  }
}

void Call::Start() {
  std::string error = Prepare();
  if (!error.empty()) {
    done_(std::move(error));
    delete this;
    return;
  }
  pending_.store(groups_.size() + 1, std::memory_order_relaxed);
  for (Group& g : groups_) {
    server_.engine.Decide({.batch = {.scope = g.scope, .checks = {g.checks.data(), g.n}},
                           .fail_mode = engine::FailMode::kOpen},
                          {g.decisions.data(), g.n}, [this, &g](engine::Verdict v) {
                            g.verdict = v;
                            if (v.kind == engine::Verdict::Kind::kDegraded)
                              server_.stats.degraded.fetch_add(1, std::memory_order_relaxed);
                            Release();
                          });
  }
  Release();
}

void Call::Release() {
  if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  Answer();
  for (const auto& status : response_.statuses()) {
    if (status.code() == pb::RateLimitResponse::OVER_LIMIT)
      response_.set_overall_code(pb::RateLimitResponse::OVER_LIMIT);
  }
  done_({});
  delete this;
}

}  // namespace internal

namespace {

using internal::pb::RateLimitRequest;
using internal::pb::RateLimitResponse;
constexpr size_t kMaxEntryBytes = 4096;

// Why a call is invalid, or "".
std::string Validate(const RateLimitRequest& req) {
  if (req.domain().empty()) return "domain: must not be empty";
  if (req.descriptors_size() == 0) return "descriptors: must not be empty";
  for (int i = 0; i < req.descriptors_size(); ++i) {
    const auto& d = req.descriptors(i);
    const std::string path = "descriptors[" + std::to_string(i) + "]";
    if (d.entries_size() == 0) return path + ".entries: must not be empty";
    for (int j = 0; j < d.entries_size(); ++j) {
      const auto& e = d.entries(j);
      const std::string at = path + ".entries[" + std::to_string(j) + "]";
      if (e.key().empty()) return at + ".key: must not be empty";
      if (e.key().size() > kMaxEntryBytes || e.value().size() > kMaxEntryBytes)
        return at + ": a key or value over " + std::to_string(kMaxEntryBytes) + " bytes";
    }
  }
  return {};
}

// What identifies the files of envoy_config as read: names, inodes, sizes and modification
// times (stat follows symlinks).
std::string Fingerprint(const std::string& path) {
  std::string out;
  auto add = [&out](const std::string& p) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return;
    // The inode too: a symlink swapped to another file (a Kubernetes ConfigMap's ..data, or a
    // RUNTIME_ROOT re-pointed) may keep the size and time.
    out += p + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
           std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ";";
  };
  add(path);
  if (DIR* dir = ::opendir(path.c_str())) {
    std::set<std::string> names;
    while (const dirent* e = ::readdir(dir)) names.insert(e->d_name);
    ::closedir(dir);
    for (const std::string& n : names) {
      if (n != "." && n != "..") add(path + "/" + n);
    }
  }
  return out;
}

// An event line on stderr, a JSON object with its time first (as the gateway's).
void LogLine(const std::string& line) {
  std::string stamped = "{\"ts\":\"";
  util::AppendIsoNow(stamped);
  stamped.append("\",").append(line, 1);
  std::fprintf(stderr, "%s\n", stamped.c_str());
}

}  // namespace

struct RlsServer::Impl final : internal::pb::RateLimitService::CallbackService {
  Impl(RlsOptions o, engine::Engine& e, PolicyFn p)
      : options(std::move(o)),
        engine(e),
        policy(std::move(p)),
        registry(options.registry ? *options.registry : own_registry),
        context{options, engine, stats, registry, detailed_series} {}

  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* ctx,
                                            const RateLimitRequest* req,
                                            RateLimitResponse* res) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    Dispatch(*req, *res, [reactor](std::string error) {
      reactor->Finish(error.empty() ? grpc::Status::OK
                                    : grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, error));
    });
    return reactor;
  }

  // Decides `req` into `res` for its domain's kind; `finish` runs once, with "" or why the call
  // is invalid (nothing consumed).
  void Dispatch(const RateLimitRequest& req, RateLimitResponse& res, internal::Done finish) {
    res.set_overall_code(RateLimitResponse::OK);
    if (std::string error = Validate(req); !error.empty()) {
      stats.invalid.fetch_add(1, std::memory_order_relaxed);
      finish(std::move(error));
      return;
    }
    internal::Done done = [this, &res, finish = std::move(finish)](std::string error) {
      if (!error.empty()) {
        stats.invalid.fetch_add(1, std::memory_order_relaxed);
      } else {
        (res.overall_code() == RateLimitResponse::OK ? stats.ok : stats.over_limit)
            .fetch_add(1, std::memory_order_relaxed);
      }
      finish(std::move(error));
    };
    std::unique_ptr<internal::Call> call;
    if (auto snapshot = Envoy()) {
      if (const config::EnvoyDomain* d = snapshot->config.Find(req.domain()))
        call = internal::EnvoyCall(context, std::move(snapshot), *d, req, res, std::move(done));
    }
    if (!call) {
      for (const RlsDomain& d : options.domains) {
        if (d.domain == req.domain())
          call = internal::MappedCall(context, d, policy(), req, res, std::move(done));
      }
    }
    if (!call) {
      stats.unknown_domain.fetch_add(1, std::memory_order_relaxed);
      for (int i = 0; i < req.descriptors_size(); ++i)
        res.add_statuses()->set_code(RateLimitResponse::OK);
      done({});
      return;
    }
    call.release()->Start();
  }

  std::shared_ptr<const internal::EnvoySnapshot> Envoy() {
    std::lock_guard lock(envoy_mu);
    return envoy;
  }

  std::optional<core::Error> LoadEnvoy() {
    if (options.envoy_config.empty()) return std::nullopt;
    const std::string fingerprint = Fingerprint(options.envoy_config);
    auto loaded = config::LoadEnvoyRlsConfig(options.envoy_config);
    if (!loaded) return core::Error{loaded.error()};
    auto snapshot = std::make_shared<internal::EnvoySnapshot>();
    snapshot->config = std::move(loaded).value();
    for (const config::EnvoyDomain& d : snapshot->config.domains) {
      for (const RlsDomain& mapped : options.domains) {
        if (mapped.domain == d.domain)
          return core::Error{d.file + ": domain: '" + d.domain + "' is also in rls.domains"};
      }
      AddCounters(d.domain, d.root, *snapshot);
    }
    std::lock_guard lock(envoy_mu);
    envoy = std::move(snapshot);
    envoy_fingerprint = fingerprint;
    return std::nullopt;
  }

  void AddCounters(const std::string& domain, const config::EnvoyDescriptor& d,
                   internal::EnvoySnapshot& snapshot) {
    for (const config::EnvoyDescriptor& c : d.descriptors) {
      if (c.rate_limit) snapshot.counters[&c] = internal::CountersFor(registry, domain, c.stat_key);
      AddCounters(domain, c, snapshot);
    }
  }

  // Re-reads envoy_config when its files change, until stopped.
  void Watch() {
    std::unique_lock lock(watch_mu);
    while (!watch_stop) {
      watch_cv.wait_for(lock, std::chrono::milliseconds(options.watch_interval_ms));
      if (watch_stop) break;
      std::string seen;
      {
        std::lock_guard e(envoy_mu);
        seen = envoy_fingerprint;
      }
      if (Fingerprint(options.envoy_config) != seen) (void)Reload();
    }
  }

  std::optional<core::Error> Reload() {
    std::lock_guard lock(reload_mu);
    auto error = LoadEnvoy();
    if (error) {
      stats.reloads_error.fetch_add(1, std::memory_order_relaxed);
      // The refused files are not read again until they change once more.
      {
        std::lock_guard e(envoy_mu);
        envoy_fingerprint = Fingerprint(options.envoy_config);
      }
      LogLine(
          "{\"level\":\"error\",\"msg\":\"rls.envoy_config refused; the previous "
          "descriptors keep serving\",\"error\":\"" +
          util::JsonEscape(error->message) + "\"}");
      return error;
    }
    stats.reloads_ok.fetch_add(1, std::memory_order_relaxed);
    LogLine("{\"level\":\"info\",\"msg\":\"rls.envoy_config loaded\"}");
    return std::nullopt;
  }

  RlsOptions options;
  engine::Engine& engine;
  PolicyFn policy;
  RlsStats stats;
  metrics::Registry own_registry;
  metrics::Registry& registry;
  std::atomic<uint64_t> detailed_series{0};
  internal::ServerContext context;
  std::mutex envoy_mu;
  std::shared_ptr<const internal::EnvoySnapshot> envoy;
  std::string envoy_fingerprint;
  std::mutex reload_mu;
  std::mutex watch_mu;
  std::condition_variable watch_cv;
  bool watch_stop = false;
  std::thread watcher;
  std::unique_ptr<grpc::Server> server;
};

RlsServer::RlsServer(RlsOptions options, engine::Engine& engine, PolicyFn policy)
    : impl_(std::make_unique<Impl>(std::move(options), engine, std::move(policy))) {}

RlsServer::~RlsServer() { Shutdown(); }

core::Result<int> RlsServer::Start() {
  if (auto error = impl_->LoadEnvoy()) return *std::move(error);
  // Kubernetes' gRPC probes and Envoy's health checks ask grpc.health.v1.Health.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(impl_->options.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(impl_.get());
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || port == 0)
    return core::Error{"rls.listen: cannot listen on " + impl_->options.listen};
  SetServing(true);
  if (!impl_->options.envoy_config.empty())
    impl_->watcher = std::thread([this] { impl_->Watch(); });
  return port;
}

std::optional<core::Error> RlsServer::Reload() {
  if (impl_->options.envoy_config.empty()) return std::nullopt;
  return impl_->Reload();
}

void RlsServer::DecideJson(std::string body,
                           std::function<void(int status, std::string body)> reply) {
  struct JsonCall {
    RateLimitRequest request;
    RateLimitResponse response;
  };
  auto call = std::make_shared<JsonCall>();
  auto problem = [](const std::string& message) {
    return "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
           "\"code\":\"invalid_request\",\"detail\":\"" +
           util::JsonEscape(message) + "\"}";
  };
  const auto parsed = google::protobuf::util::JsonStringToMessage(body, &call->request);
  if (!parsed.ok()) {
    reply(400, problem("not a RateLimitRequest: " + std::string(parsed.message())));
    return;
  }
  impl_->Dispatch(
      call->request, call->response, [call, reply = std::move(reply), problem](std::string error) {
        if (!error.empty()) {
          reply(400, problem(error));
          return;
        }
        std::string json;
        (void)google::protobuf::util::MessageToJsonString(call->response, &json);
        reply(call->response.overall_code() == RateLimitResponse::OVER_LIMIT ? 429 : 200,
              std::move(json));
      });
}

void RlsServer::SetServing(bool serving) {
  if (!impl_->server) return;
  grpc::HealthCheckServiceInterface* health = impl_->server->GetHealthCheckService();
  if (!health) return;
  // By name, as Envoy's and Kubernetes' checks may ask it, and the server's overall status ("").
  health->SetServingStatus("envoy.service.ratelimit.v3.RateLimitService", serving);
  health->SetServingStatus(serving);
}

void RlsServer::Shutdown() {
  if (!impl_) return;
  {
    std::lock_guard lock(impl_->watch_mu);
    impl_->watch_stop = true;
  }
  impl_->watch_cv.notify_all();
  if (impl_->watcher.joinable()) impl_->watcher.join();
  if (impl_->server) {
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    impl_->server.reset();
  }
}

const RlsStats& RlsServer::stats() const { return impl_->stats; }

void RlsServer::ExportMetrics(metrics::Registry& registry) const {
  const RlsStats& st = stats();
  using metrics::ReadOf;
  registry.CounterFrom("tollgate_rls_ok_total", "Envoy RLS answers OK.", ReadOf(st.ok));
  registry.CounterFrom("tollgate_rls_over_limit_total", "Envoy RLS answers OVER_LIMIT.",
                       ReadOf(st.over_limit));
  registry.CounterFrom("tollgate_rls_unknown_domain_total",
                       "Envoy RLS calls for a domain not configured.", ReadOf(st.unknown_domain));
  registry.CounterFrom("tollgate_rls_unknown_key_total",
                       "Envoy RLS descriptors with an unknown API key.", ReadOf(st.unknown_key));
  registry.CounterFrom("tollgate_rls_denied_total",
                       "Envoy RLS descriptors of rls.domains the deny list refuses (OVER_LIMIT).",
                       ReadOf(st.denied));
  registry.CounterFrom("tollgate_rls_invalid_total",
                       "Envoy RLS calls answered INVALID_ARGUMENT (nothing consumed).",
                       ReadOf(st.invalid));
  registry.CounterFrom("tollgate_rls_degraded_total",
                       "Envoy RLS decisions the store could not make, answered OK (fail open).",
                       ReadOf(st.degraded));
  registry.CounterFrom("tollgate_rls_shadow_mode_total",
                       "Envoy RLS calls over a limit answered OK by rls.shadow_mode.",
                       ReadOf(st.shadow_ok));
  registry.CounterFrom("tollgate_rls_config_reloads_ok_total",
                       "rls.envoy_config reloads installed.", ReadOf(st.reloads_ok));
  registry.CounterFrom("tollgate_rls_config_reloads_error_total",
                       "rls.envoy_config reloads refused (the previous files keep serving).",
                       ReadOf(st.reloads_error));
}

}  // namespace tollgate::rls
