#include <tollgate/tollgate.hpp>

#include <array>

#include <tollgate/contract/contract.hpp>
#include <tollgate/engine/admitter.hpp>
#include <tollgate/engine/engine.hpp>
#include <tollgate/policy/policy.hpp>
#include <tollgate/store/memory_store.hpp>
#include <tollgate/util/clock.hpp>
#include <tollgate/util/target.hpp>

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

core::Result<std::unique_ptr<Limiter>> Make(
    core::Result<config::Config> config,
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
  Answer a;
  // The path is made canonical exactly as the gateway makes it (docs/http-contract.md): an
  // embedding service whose router resolves "/public/../v1/x" is limited on what it serves.
  std::string buffer;
  util::CanonicalTarget target;
  if (const char* error = util::CanonicalizeTarget(r.method, r.path, {}, buffer, target)) {
    a.allowed = false;
    a.status = 400;
    a.code = "invalid_request_target";
    a.body = contract::ProblemBody(a.status, a.code, error);
    return a;
  }
  const std::string client = pol.ClientAddress(r.client_address, "");
  std::array<store::Check, engine::kMaxChecks> checks;
  std::array<core::Decision, engine::kMaxChecks> decisions;
  // The one admission (engine/admitter.hpp). The library has no header fields, so no method
  // overrides, and only the configured deny list (no admin API).
  const policy::Route& route =
      engine::StrictestRoute(pol, r.method, target.path, target.query, engine::NoOverrideFields{});
  const bool reads_key = engine::ReadsKey(&route, false) && !r.api_key.empty();
  engine::Scopes scopes;
  const engine::Admitted admission =
      engine::Admitter(pol).Admit({.route = &route,
                                   .presented_key = !r.api_key.empty(),
                                   .key = reads_key ? pol.FindByKey(r.api_key) : nullptr,
                                   .client = client,
                                   .query = target.query,
                                   .now = util::SystemClock::Instance().Now()},
                                  checks, scopes);
  if (admission.key) a.key_id = admission.key->id;
  if (admission.denied) {  // as the gateway answers (docs/http-contract.md, "Deny list")
    a.allowed = false;
    a.status = 403;
    a.code = "blocked";
    a.body = contract::ProblemBody(a.status, a.code, "this client is blocked");
    return a;
  }
  // The library answers at once: a smoothing limit rejects instead of delaying.
  for (size_t i = 0; i < admission.n; ++i) checks[i].may_delay = false;
  if (admission.kind == engine::Admission::Kind::kNone) return a;
  if (admission.kind == engine::Admission::Kind::kInvalidCost) {
    a.allowed = false;
    a.status = 400;
    a.code = "invalid_cost";
    a.body = contract::ProblemBody(a.status, a.code, admission.error);
    return a;
  }
  const size_t n = admission.n;
  engine::Verdict v;
  impl_->engine.Decide({.batch = {.scope = scopes.primary, .checks = {checks.data(), n}}},
                       {decisions.data(), n}, [&v](engine::Verdict x) { v = x; });
  // The one answer mapping every adapter shares (contract/).
  contract::HeaderList headers;
  const contract::AnswerOptions options{.headers = &pol.config().headers};
  const contract::Answer answer =
      admission.kind == engine::Admission::Kind::kInvalidKey
          ? contract::RespondInvalidKey(v, checks[0], decisions[0],
                                        r.api_key.empty() ? contract::Credential::kNoKey
                                                          : contract::Credential::kUnknownKey,
                                        options, headers, a.body)
          : contract::Respond(v, {checks.data(), n}, {decisions.data(), n}, admission.enforced,
                              options, headers, a.body);
  a.allowed = answer.allowed;
  a.status = answer.status;
  a.code = std::string(answer.code);
  a.headers = headers.Pairs();
  return a;
}

}  // namespace tollgate
