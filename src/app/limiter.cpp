#include <tollgate/tollgate.hpp>

#include <array>

#include <tollgate/engine/checks.hpp>
#include <tollgate/engine/engine.hpp>
#include <tollgate/http/contract.hpp>
#include <tollgate/policy/policy.hpp>
#include <tollgate/store/memory_store.hpp>
#include <tollgate/util/clock.hpp>

namespace tollgate {

struct Limiter::Impl {
  explicit Impl(std::shared_ptr<const policy::Policy> p)
      : policy(std::move(p)),
        memory(store::MemoryStoreOptions{.max_keys = policy->config().store.max_keys}),
        engine(memory) {}
  std::shared_ptr<const policy::Policy> policy;
  store::MemoryStore memory;
  engine::Engine engine;
};

namespace {

core::Result<std::unique_ptr<Limiter>> Make(core::Result<config::Config> config,
                                            std::unique_ptr<Limiter> (*wrap)(std::unique_ptr<Limiter::Impl>)) {
  if (!config) return core::Error{config.error()};
  auto policy = policy::Policy::Build(std::move(config).value());
  if (!policy) return core::Error{policy.error()};
  return wrap(std::make_unique<Limiter::Impl>(*policy));
}

}  // namespace

Limiter::Limiter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Limiter::~Limiter() = default;

core::Result<std::unique_ptr<Limiter>> Limiter::FromYaml(const std::string& yaml) {
  return Make(config::ParseConfig(yaml), [](std::unique_ptr<Impl> i) {
    return std::unique_ptr<Limiter>(new Limiter(std::move(i)));
  });
}

core::Result<std::unique_ptr<Limiter>> Limiter::FromFile(const std::string& path) {
  return Make(config::LoadConfigFile(path), [](std::unique_ptr<Impl> i) {
    return std::unique_ptr<Limiter>(new Limiter(std::move(i)));
  });
}

Answer Limiter::Check(const Request& r) {
  const policy::Policy& pol = *impl_->policy;
  const std::string_view path = r.path.substr(0, r.path.find('?'));
  const std::string_view query =
      r.path.find('?') == std::string_view::npos ? std::string_view() : r.path.substr(r.path.find('?') + 1);
  const policy::Route& route = pol.Match(r.method, path);
  const std::string client = pol.ClientAddress(r.client_address, "");
  Answer a;
  std::array<store::Check, 16> checks;
  std::array<core::Decision, 16> decisions;
  const bool keyed = route.identity == config::RouteIdentity::kKey;
  const policy::Key* key = keyed && !r.api_key.empty() ? pol.FindByKey(r.api_key) : nullptr;
  if (key) a.key_id = key->id;
  std::string scope;
  const engine::Admission admission = engine::Admit(pol, route, keyed, key, client, query, std::nullopt,
                                                    util::SystemClock::Instance().Now(), checks, scope);
  if (admission.kind == engine::Admission::Kind::kNone) return a;
  if (admission.kind == engine::Admission::Kind::kInvalidCost) {
    a.allowed = false;
    a.status = 400;
    a.code = "invalid_cost";
    a.body = http::ErrorBody(a.code, admission.error);
    return a;
  }
  const size_t n = admission.n;
  engine::Verdict v;
  impl_->engine.Decide({.batch = {.scope = scope, .checks = {checks.data(), n}}}, {decisions.data(), n},
                       [&v](engine::Verdict x) { v = x; });
  if (admission.kind == engine::Admission::Kind::kInvalidKey) {
    a.allowed = false;
    if (v.kind == engine::Verdict::Kind::kRejected) {
      a.status = 429;
      a.code = "rate_limited";
      a.body = http::RejectionBody({checks.data(), 1}, {decisions.data(), 1}, v);
      a.headers.emplace_back("Retry-After", std::to_string(std::max<int64_t>(1, v.retry_after.CeilSeconds())));
    } else {
      a.status = 401;
      a.code = r.api_key.empty() ? "missing_api_key" : "invalid_api_key";
      a.body = http::ErrorBody(a.code, r.api_key.empty() ? "an API key is required" : "the API key is not valid");
      a.headers.emplace_back("WWW-Authenticate", "Bearer");
    }
    return a;
  }
  const policy::Plan* plan = admission.plan;
  const std::span<const store::Check> cs{checks.data(), n};
  const std::span<const core::Decision> ds{decisions.data(), n};
  if (plan->enforced || v.kind == engine::Verdict::Kind::kRejected) {
    http::HeaderList h;
    http::AppendRateLimitHeaders(pol.config().headers, cs, ds, v, h);
    a.headers = h.Pairs();
  }
  if (v.kind == engine::Verdict::Kind::kRejected) {
    a.allowed = false;
    a.status = 429;
    a.code = std::string(core::RejectCodeName(v.code));
    a.body = http::RejectionBody(cs, ds, v);
  }
  return a;
}

}  // namespace tollgate
