// GET /admin/explain?key_id=ID|address=IP&method=M&path=P: why a request of that caller would
// be admitted or rejected, without consuming anything (the checks are decided in peek mode).
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <tollgate/engine/admitter.hpp>
#include <tollgate/util/clock.hpp>
#include <tollgate/util/query.hpp>
#include <tollgate/util/target.hpp>

#include "endpoints.hpp"
#include "worker.hpp"

namespace tollgate::http {
namespace json = boost::json;

namespace {

// The state one explanation holds while the store decides.
struct Explanation {
  std::shared_ptr<const policy::Policy> policy;
  std::array<store::Check, engine::kMaxChecks> checks;
  std::array<core::Decision, engine::kMaxChecks> decisions;
  engine::Scopes scopes;
  json::object answer;
  std::string target_buffer;
};

std::string_view IdentityKind(config::RouteIdentity identity) {
  switch (identity) {
    case config::RouteIdentity::kKey:
      return "key";
    case config::RouteIdentity::kIp:
      return "ip";
    case config::RouteIdentity::kKeyOrIp:
      return "key_or_ip";
    case config::RouteIdentity::kClientCert:
      return "client_cert";
    default:
      return "none";
  }
}

json::object KeyJson(const policy::Key& key, core::Instant now) {
  json::array overrides;
  for (const policy::Override& o : key.overrides) {
    const bool active = !o.expires || now < *o.expires;
    overrides.push_back(json::object{
        {"limit", key.plan->limits[o.limit_index].name},
        {"quota", o.limit.PolicyQuota()},
        {"expires_unix", o.expires ? json::value(o.expires->unix_micros() / 1'000'000) : nullptr},
        {"active", active}});
  }
  return {{"key_id", key.id},
          {"account", key.account},
          {"plan", key.plan->name},
          {"configured_plan", key.plan_name},
          {"plan_is_strictest_fallback", key.plan->name != key.plan_name},
          {"mode", key.enforced ? "enforce" : "shadow"},
          {"overrides", std::move(overrides)}};
}

std::string_view LimitedBy(const engine::Admitted& a) {
  switch (a.kind) {
    case engine::Admission::Kind::kNone:
      return "nothing";
    case engine::Admission::Kind::kInvalidKey:
      return "invalid_key_limit";
    default:
      return a.keyed ? "key" : "address";
  }
}

}  // namespace

void Gateway::Impl::Explain(std::string query, AdminReply reply) {
  auto problem = [&reply](int status, std::string_view code, std::string_view detail) {
    reply(status, contract::ProblemBody(status, code, detail));
  };
  const auto key_id = util::QueryValue(query, "key_id");
  const auto address = util::QueryValue(query, "address");
  const std::string method = util::QueryValue(query, "method").value_or("GET");
  const std::string raw_path = util::QueryValue(query, "path").value_or("/");
  const std::string host_field = util::QueryValue(query, "host").value_or("");  // as Host reads
  const std::optional<std::string_view> host = policy::RouteHost(host_field);
  if (!host) return problem(400, "invalid_host", "the host is not a plain name");
  if (key_id.has_value() == address.has_value())
    return problem(400, "invalid_explain", "give key_id or address (and method, path)");
  auto e = std::make_shared<Explanation>();
  e->policy = CurrentPolicy();
  const policy::Policy& pol = *e->policy;
  util::CanonicalTarget target;
  if (const char* error = util::CanonicalizeTarget(method, raw_path, {}, e->target_buffer, target))
    return problem(400, "invalid_request_target", error);
  const core::Instant now = util::SystemClock::Instance().Now();
  const policy::Key* key = nullptr;
  std::string client;
  if (key_id) {
    key = pol.FindById(*key_id);
    if (!key) return problem(404, "unknown_key", "no key with this id");
    e->answer["identity"] = KeyJson(*key, now);
  } else {
    if (!policy::ParseAddress(*address)) return problem(400, "invalid_explain", "not an address");
    client = pol.ClientAddress(*address, "");
    e->answer["identity"] = json::object{{"address", client}, {"plan", "anonymous"}};
  }
  // The route and the deny verdict a request of that caller would meet (no header overrides:
  // an explanation names its method).
  const policy::Route& route = engine::StrictestRoute(pol, method, target.path, target.query,
                                                      engine::NoOverrideFields{}, *host);
  e->answer["route"] = json::object{{"name", route.name},
                                    {"identity", IdentityKind(route.identity)},
                                    {"fail_mode", config::FailModeName(route.fail_mode)}};
  const std::shared_ptr<const policy::DenyList> runtime = RuntimeDeny();
  const engine::Admitted a = engine::Admitter(pol).Admit({.route = &route,
                                                          .presented_key = key != nullptr,
                                                          .key = key,
                                                          .client = client,
                                                          .query = target.query,
                                                          .now = now,
                                                          .runtime_deny = runtime.get(),
                                                          .checks_when_denied = true},
                                                         e->checks, e->scopes);
  e->answer["denied_by_deny_list"] = a.denied;
  if (a.kind == engine::Admission::Kind::kInvalidCost) return problem(400, "invalid_cost", a.error);
  e->answer["cost"] = a.cost;
  e->answer["limited_by"] = LimitedBy(a);
  if (a.n == 0) {
    e->answer["limits"] = json::array{};
    e->answer["would"] = "pass";
    return reply(200, json::serialize(e->answer));
  }
  engine->Decide(
      {.batch = {.scope = e->scopes.primary,
                 .checks = {e->checks.data(), a.n},
                 .mode = store::Mode::kPeek}},
      {e->decisions.data(), a.n}, [e, n = a.n, reply = std::move(reply)](engine::Verdict v) {
        json::array limits;
        for (size_t i = 0; i < n; ++i) {
          const store::Check& c = e->checks[i];
          const core::Decision& d = e->decisions[i];
          json::object item = PolicyJson(c, d, v.now);
          item["scope"] = c.scope.empty() ? e->scopes.primary : std::string(c.scope);
          item["enforced"] = c.enforced;
          item["would_reject"] = !d.allowed;
          item["frees_in_seconds"] = contract::SecondsUntilMoreQuota(c, d);
          limits.push_back(std::move(item));
        }
        e->answer["limits"] = std::move(limits);
        e->answer["would"] = v.kind == engine::Verdict::Kind::kRejected      ? "reject"
                             : v.kind == engine::Verdict::Kind::kUnavailable ? "unavailable"
                             : v.kind == engine::Verdict::Kind::kDegraded    ? "pass_degraded"
                                                                             : "pass";
        if (v.shadow_rejections > 0) e->answer["shadow_rejections"] = v.shadow_rejections;
        reply(200, json::serialize(e->answer));
      });
}

}  // namespace tollgate::http
