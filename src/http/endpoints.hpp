// The bodies of the built-in endpoints (GET /v1/rate-limit, /v1/usage, /admin/keys/ID): pure
// functions of the policy and the decision, built with Boost.JSON.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>

#include <tollgate/core/decision.hpp>
#include <tollgate/engine/engine.hpp>
#include <tollgate/metrics/space_saving.hpp>
#include <tollgate/policy/policy.hpp>
#include <tollgate/store/store.hpp>
#include <tollgate/usage/meter.hpp>
#include <tollgate/usage/usage.hpp>

namespace tollgate::http {

usage::Outcome OutcomeOf(int status, bool rejected);

// GET /admin/keys/ID.
std::string AdminKeyBody(const policy::Key& k);

// GET /v1/rate-limit: the caller's limits and usage.
std::string RateLimitStatusBody(const policy::Key& key, const policy::Plan& plan,
                                std::span<const store::Check> cs,
                                std::span<const core::Decision> ds, const engine::Verdict& v);

// GET /v1/usage: the key's counts among its account's records, per period.
struct UsagePeriod {
  std::string_view name;  // "day", "month"
  std::string period;     // its label, e.g. 2026-12
  std::vector<usage::UsageRecord> records;
};
std::string KeyUsageBody(const policy::Key& key, std::span<const UsagePeriod> periods);

// One limit's state, as GET /v1/rate-limit and GET /admin/explain list it.
boost::json::object PolicyJson(const store::Check& check, const core::Decision& d,
                               core::Instant now);

// GET /admin/top: {"by", "of", "window_seconds", "total", "error_bound", "items": [{"key"|
// "address", "count", "error"}]}.
std::string TopBody(std::string_view by, std::string_view of, int64_t window_s,
                    const metrics::SpaceSaving& sketch, size_t n);

// GET /admin/deny: {"config": [{"kind", "value"}...], "admin": [...]}.
std::string DenyListBody(std::span<const policy::DenyList::Entry> configured,
                         std::span<const policy::DenyList::Entry> added);

}  // namespace tollgate::http
