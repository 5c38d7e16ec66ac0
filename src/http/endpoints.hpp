// The bodies of the built-in endpoints (GET /v1/rate-limit, /v1/usage, /admin/keys/ID): pure
// functions of the policy and the decision.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <tollgate/core/decision.hpp>
#include <tollgate/engine/engine.hpp>
#include <tollgate/policy/policy.hpp>
#include <tollgate/store/store.hpp>
#include <tollgate/usage/meter.hpp>
#include <tollgate/usage/usage.hpp>

namespace tollgate::http {

usage::Outcome OutcomeOf(int status, bool rejected);

std::string CountsJson(const usage::UsageCounts& c);

// GET /admin/keys/ID.
std::string AdminKeyBody(const policy::Key& k);

// GET /v1/rate-limit: the caller's limits and usage.
std::string RateLimitStatusBody(const policy::Key& key, const policy::Plan& plan,
                                std::span<const store::Check> cs,
                                std::span<const core::Decision> ds, const engine::Verdict& v);

// One period's part of GET /v1/usage: the key's counts among the account's records.
void AppendUsagePeriod(std::string& body, std::string_view name, const std::string& period,
                       std::string_view key_id, const std::vector<usage::UsageRecord>& records);

std::string UsageHead(const policy::Key& key);

}  // namespace tollgate::http
