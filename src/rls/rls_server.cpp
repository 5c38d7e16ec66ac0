#include <tollgate/rls/rls_server.hpp>

#include <future>
#include <span>
#include <string>

#include <grpcpp/grpcpp.h>

#include <tollgate/contract/contract.hpp>
#include <tollgate/engine/checks.hpp>
#include <tollgate/metrics/metrics.hpp>
#include <tollgate/util/clock.hpp>

#include "rls.grpc.pb.h"

namespace tollgate::rls {
namespace {

namespace pb = envoy::service::ratelimit::v3;
using engine::kMaxChecks;

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

// The limit that decided a descriptor, as Envoy reads it: name, rate, what is left, and when
// the caller may try again (a denial) or the limit resets.
void DescribeStatus(const store::Check& check, const core::Decision& d, core::Instant now,
                    pb::RateLimitResponse::DescriptorStatus* status) {
  auto* limit = status->mutable_current_limit();
  limit->set_name(std::string(check.name));
  DescribeLimit(*check.limit, now, limit);
  status->set_limit_remaining(static_cast<uint32_t>(std::min<int64_t>(d.remaining, UINT32_MAX)));
  const core::Duration until = !d.allowed && !d.retry_after.IsInfinite() ? d.retry_after : d.reset;
  status->mutable_duration_until_reset()->set_seconds(until.CeilSeconds());
}

}  // namespace

struct RlsServer::Impl final : pb::RateLimitService::Service {
  Impl(RlsOptions o, engine::Engine& e, PolicyFn p)
      : options(std::move(o)), engine(e), policy(std::move(p)) {}

  grpc::Status ShouldRateLimit(grpc::ServerContext*, const pb::RateLimitRequest* req,
                               pb::RateLimitResponse* res) override {
    const std::shared_ptr<const policy::Policy> pol = policy();
    const RlsDomain* domain = nullptr;
    for (const RlsDomain& d : options.domains)
      if (d.domain == req->domain()) domain = &d;
    res->set_overall_code(pb::RateLimitResponse::OK);
    if (!domain) {
      stats.unknown_domain.fetch_add(1, std::memory_order_relaxed);
      for (int i = 0; i < req->descriptors_size(); ++i)
        res->add_statuses()->set_code(pb::RateLimitResponse::OK);
      stats.ok.fetch_add(1, std::memory_order_relaxed);
      return grpc::Status::OK;
    }
    const int64_t cost = req->hits_addend() == 0 ? 1 : req->hits_addend();
    const core::Instant now = util::SystemClock::Instance().Now();
    for (const pb::RateLimitDescriptor& desc : req->descriptors()) {
      pb::RateLimitResponse::DescriptorStatus* status = res->add_statuses();
      status->set_code(pb::RateLimitResponse::OK);
      const policy::Key* key = nullptr;
      const policy::Plan* plan = nullptr;
      std::string address;
      bool unknown_key = false;
      for (const auto& e : desc.entries()) {
        if (!domain->key_entry.empty() && e.key() == domain->key_entry) {
          key = pol->FindByKey(policy::BearerToken(e.value()).value_or(e.value()));
          unknown_key = key == nullptr;
          if (key) plan = key->plan;
        } else if (!domain->ip_entry.empty() && e.key() == domain->ip_entry && !plan) {
          address = pol->ClientAddress(e.value(), "");
          plan = &pol->anonymous();
        }
      }
      if (unknown_key) {
        stats.unknown_key.fetch_add(1, std::memory_order_relaxed);
        status->set_code(pb::RateLimitResponse::OVER_LIMIT);
        res->set_overall_code(pb::RateLimitResponse::OVER_LIMIT);
        continue;
      }
      if (!plan || plan->limits.empty()) continue;
      std::array<store::Check, kMaxChecks> checks;
      std::array<core::Decision, kMaxChecks> decisions;
      engine::Scopes scopes;
      engine::AssignScope(scopes.primary, *plan, key, address);
      if (plan->mixed_scopes) scopes.Fill(key, address);
      const int64_t own_cost =
          desc.has_hits_addend()
              ? static_cast<int64_t>(std::min<uint64_t>(desc.hits_addend().value(), INT32_MAX))
              : cost;
      const size_t n = engine::ChecksFor(*plan, key, own_cost, now, checks, &scopes);
      // Envoy holds nothing for us: a smoothing limit rejects instead of delaying.
      for (size_t i = 0; i < n; ++i) checks[i].may_delay = false;
      const std::string& scope = scopes.primary;
      std::promise<engine::Verdict> done;
      engine.Decide({.batch = {.scope = scope, .checks = {checks.data(), n}},
                     .fail_mode = engine::FailMode::kOpen},
                    {decisions.data(), n}, [&done](engine::Verdict v) { done.set_value(v); });
      const engine::Verdict v = done.get_future().get();
      // The one answer mapping (contract/): a denial is OVER_LIMIT; its headers are Envoy's to add.
      contract::HeaderList headers;
      std::string body;  // RLS has no body
      const contract::AnswerOptions answer{.headers = &pol->config().headers};
      const std::span<const store::Check> cs{checks.data(), n};
      const std::span<const core::Decision> ds{decisions.data(), n};
      const bool enforced = key ? key->enforced : plan->enforced;
      if (!contract::Respond(v, cs, ds, enforced, answer, headers, body).allowed) {
        status->set_code(pb::RateLimitResponse::OVER_LIMIT);
        res->set_overall_code(pb::RateLimitResponse::OVER_LIMIT);
      }
      for (auto& [k, val] : headers.Pairs()) {
        auto* h = res->add_response_headers_to_add();
        h->set_key(k);
        h->set_value(val);
      }
      if (v.primary >= 0 && enforced) {
        const auto p = static_cast<size_t>(v.primary);
        DescribeStatus(checks[p], decisions[p], v.now, status);
      }
    }
    (res->overall_code() == pb::RateLimitResponse::OK ? stats.ok : stats.over_limit)
        .fetch_add(1, std::memory_order_relaxed);
    return grpc::Status::OK;
  }

  RlsOptions options;
  engine::Engine& engine;
  PolicyFn policy;
  RlsStats stats;
  std::unique_ptr<grpc::Server> server;
};

RlsServer::RlsServer(RlsOptions options, engine::Engine& engine, PolicyFn policy)
    : impl_(std::make_unique<Impl>(std::move(options), engine, std::move(policy))) {}

RlsServer::~RlsServer() { Shutdown(); }

core::Result<int> RlsServer::Start() {
  // Kubernetes' gRPC probes and Envoy's health checks ask grpc.health.v1.Health.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(impl_->options.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(impl_.get());
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                              impl_->options.threads);
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || port == 0)
    return core::Error{"rls.listen: cannot listen on " + impl_->options.listen};
  SetServing(true);
  return port;
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
  if (impl_ && impl_->server) {
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
}

}  // namespace tollgate::rls
