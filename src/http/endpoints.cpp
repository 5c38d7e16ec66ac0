#include "endpoints.hpp"

#include <tollgate/contract/contract.hpp>
#include <tollgate/core/limit.hpp>

namespace tollgate::http {

using contract::JsonEscape;

usage::Outcome OutcomeOf(int status, bool rejected) {
  if (rejected) return usage::Outcome::kRejected;
  if (status >= 500) return usage::Outcome::kServerError;
  if (status >= 400) return usage::Outcome::kClientError;
  return usage::Outcome::kSuccess;
}

std::string CountsJson(const usage::UsageCounts& c) {
  std::string out = "{";
  for (size_t o = 0; o < usage::kOutcomes; ++o) {
    out += (o ? "," : "") + std::string("\"") + usage::kOutcomeNames[o] +
           "\":{\"requests\":" + std::to_string(c.requests[o]) +
           ",\"cost\":" + std::to_string(c.cost[o]) + "}";
  }
  return out + "}";
}

std::string AdminKeyBody(const policy::Key& k) {
  std::string body = "{\"id\":\"" + JsonEscape(k.id) + "\",\"account\":\"" + JsonEscape(k.account) +
                     "\",\"plan\":\"" + JsonEscape(k.plan->name) + "\",\"configured_plan\":\"" +
                     JsonEscape(k.plan_name) +
                     "\",\"enforced\":" + (k.plan->enforced ? "true" : "false") +
                     ",\"overrides\":[";
  for (size_t i = 0; i < k.overrides.size(); ++i) {
    const auto& o = k.overrides[i];
    body += (i ? "," : "") + std::string("{\"limit\":\"") +
            JsonEscape(k.plan->limits[o.limit_index].name) +
            "\",\"quota\":" + std::to_string(o.limit.PolicyQuota()) + ",\"expires_unix\":" +
            (o.expires ? std::to_string(o.expires->unix_micros() / 1'000'000) : "null") + "}";
  }
  return body + "]}";
}

std::string RateLimitStatusBody(const policy::Key& key, const policy::Plan& plan,
                                std::span<const store::Check> cs,
                                std::span<const core::Decision> ds, const engine::Verdict& v) {
  const int p = v.primary;
  std::string body = "{\"key_id\":\"" + JsonEscape(key.id) + "\",\"plan\":\"" +
                     JsonEscape(plan.name) + "\",\"mode\":\"" +
                     (plan.enforced ? "enforce" : "shadow") + "\"";
  if (p >= 0) {
    body += ",\"limit\":" + std::to_string(ds[p].limit) +
            ",\"remaining\":" + std::to_string(ds[p].remaining) +
            ",\"resetSeconds\":" + std::to_string(ds[p].reset.CeilSeconds());
  }
  body += ",\"policies\":[";
  std::string burst, quota;
  for (size_t i = 0; i < cs.size(); ++i) {
    const auto& d = ds[i];
    const auto alg = cs[i].limit->algorithm();
    std::string item =
        "{\"name\":\"" + JsonEscape(cs[i].name) + "\",\"algorithm\":\"" +
        std::string(core::AlgorithmName(alg)) + "\",\"limit\":" + std::to_string(d.limit) +
        ",\"remaining\":" + std::to_string(d.remaining) +
        ",\"resetSeconds\":" + std::to_string(d.reset.CeilSeconds()) +
        ",\"windowSeconds\":" + std::to_string(cs[i].limit->PolicyWindowSeconds(v.now));
    if (alg == core::Algorithm::kQuota) {
      const auto& q = std::get<core::Quota>(cs[i].limit->impl());
      item += ",\"period\":\"" + std::string(q.period() == core::Period::kDay ? "day" : "month") +
              "\",\"used\":" + std::to_string(d.used) +
              ",\"allowance\":" + (q.allowance() ? std::to_string(*q.allowance()) : "null") +
              ",\"ceiling\":" + (q.ceiling() ? std::to_string(*q.ceiling()) : "null") +
              ",\"overAllowance\":" + (d.over_allowance ? "true" : "false");
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

void AppendUsagePeriod(std::string& body, std::string_view name, const std::string& period,
                       std::string_view key_id, const std::vector<usage::UsageRecord>& records) {
  usage::UsageCounts counts;
  for (const auto& r : records) {
    if (r.key_id == key_id) counts = r.counts;
  }
  body += ",\"" + std::string(name) + "\":{\"period\":\"" + period +
          "\",\"usage\":" + CountsJson(counts) + "}";
}

std::string UsageHead(const policy::Key& key) {
  return "{\"key_id\":\"" + JsonEscape(key.id) + "\",\"account\":\"" + JsonEscape(key.account) +
         "\"";
}

}  // namespace tollgate::http
