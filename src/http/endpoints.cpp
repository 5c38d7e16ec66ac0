#include "endpoints.hpp"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <tollgate/core/limit.hpp>

namespace tollgate::http {
namespace json = boost::json;

usage::Outcome OutcomeOf(int status, bool rejected) {
  if (rejected) return usage::Outcome::kRejected;
  if (status >= 500) return usage::Outcome::kServerError;
  if (status >= 400) return usage::Outcome::kClientError;
  return usage::Outcome::kSuccess;
}

namespace {

json::object CountsJson(const usage::UsageCounts& c) {
  json::object out;
  for (size_t o = 0; o < usage::kOutcomes; ++o) {
    out[usage::kOutcomeNames[o]] = {{"requests", c.requests[o]}, {"cost", c.cost[o]}};
  }
  return out;
}

json::value OrNull(const std::optional<int64_t>& v) { return v ? json::value(*v) : nullptr; }

}  // namespace

// One limit's state, as GET /v1/rate-limit lists it.
json::object PolicyJson(const store::Check& check, const core::Decision& d, core::Instant now) {
  const auto alg = check.limit->algorithm();
  json::object item{{"name", check.name},
                    {"algorithm", core::AlgorithmName(alg)},
                    {"limit", d.limit},
                    {"remaining", d.remaining},
                    {"resetSeconds", d.reset.CeilSeconds()},
                    {"windowSeconds", check.limit->PolicyWindowSeconds(now)}};
  if (alg == core::Algorithm::kQuota) {
    const auto& q = std::get<core::Quota>(check.limit->impl());
    item["period"] = q.period() == core::Period::kDay ? "day" : "month";
    item["used"] = d.used;
    item["allowance"] = OrNull(q.allowance());
    item["ceiling"] = OrNull(q.ceiling());
    item["overAllowance"] = d.over_allowance;
  }
  return item;
}

std::string AdminKeyBody(const policy::Key& k) {
  json::array overrides;
  for (const auto& o : k.overrides) {
    overrides.push_back(json::object{
        {"limit", k.plan->limits[o.limit_index].name},
        {"quota", o.limit.PolicyQuota()},
        {"expires_unix", o.expires ? json::value(o.expires->unix_micros() / 1'000'000) : nullptr}});
  }
  return json::serialize(json::object{{"id", k.id},
                                      {"account", k.account},
                                      {"plan", k.plan->name},
                                      {"configured_plan", k.plan_name},
                                      {"enforced", k.enforced},
                                      {"overrides", std::move(overrides)}});
}

std::string RateLimitStatusBody(const policy::Key& key, const policy::Plan& plan,
                                std::span<const store::Check> cs,
                                std::span<const core::Decision> ds, const engine::Verdict& v) {
  json::object body{
      {"key_id", key.id}, {"plan", plan.name}, {"mode", key.enforced ? "enforce" : "shadow"}};
  if (v.primary >= 0) {
    const core::Decision& d = ds[static_cast<size_t>(v.primary)];
    body["limit"] = d.limit;
    body["remaining"] = d.remaining;
    body["resetSeconds"] = d.reset.CeilSeconds();
  }
  json::array policies;
  json::value burst, quota;  // the first of each kind, named for clients that want one
  for (size_t i = 0; i < cs.size(); ++i) {
    json::object item = PolicyJson(cs[i], ds[i], v.now);
    json::value& first = cs[i].limit->algorithm() == core::Algorithm::kQuota ? quota : burst;
    if (first.is_null()) first = item;
    policies.push_back(std::move(item));
  }
  body["policies"] = std::move(policies);
  if (!burst.is_null()) body["burst"] = std::move(burst);
  if (!quota.is_null()) body["quota"] = std::move(quota);
  return json::serialize(body);
}

std::string DenyListBody(std::span<const policy::DenyList::Entry> configured,
                         std::span<const policy::DenyList::Entry> added) {
  auto list = [](std::span<const policy::DenyList::Entry> entries) {
    json::array out;
    for (const auto& e : entries)
      out.push_back(json::object{{"kind", policy::DenyList::NameOf(e.kind)}, {"value", e.value}});
    return out;
  };
  return json::serialize(json::object{{"config", list(configured)}, {"admin", list(added)}});
}

std::string TopBody(std::string_view by, std::string_view of, int64_t window_s,
                    const metrics::SpaceSaving& sketch, size_t n) {
  json::array items;
  for (const auto& item : sketch.Top(n)) {
    items.push_back(json::object{{of, item.key}, {"count", item.count}, {"error", item.error}});
  }
  return json::serialize(json::object{
      {"by", by},
      {"of", of},
      {"window_seconds", window_s},
      {"total", sketch.total()},
      {"error_bound", sketch.total() / sketch.capacity()},  // count - error <= true <= count
      {"items", std::move(items)}});
}

std::string KeyUsageBody(const policy::Key& key, std::span<const UsagePeriod> periods) {
  json::object body{{"key_id", key.id}, {"account", key.account}};
  for (const UsagePeriod& p : periods) {
    usage::UsageCounts counts;
    for (const auto& r : p.records) {
      if (r.key_id == key.id) counts = r.counts;
    }
    body[p.name] = {{"period", p.period}, {"usage", CountsJson(counts)}};
  }
  return json::serialize(body);
}

}  // namespace tollgate::http
