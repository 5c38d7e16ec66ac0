// The checks of one request: a plan's limits, with a key's overrides, as store checks.
#pragma once

#include <span>
#include <string>

#include <tollgate/core/time.hpp>
#include <tollgate/policy/policy.hpp>
#include <tollgate/store/store.hpp>

namespace tollgate::engine {

// Fills `out` with one check per limit of `plan` (a key's override replaces a plan limit until
// it expires), each of `cost`, enforced unless the plan is in shadow mode. Returns the count
// (at most out.size()). `key` may be null (anonymous limits). The checks point into `plan` and
// `key`, which must outlive them.
size_t ChecksFor(const policy::Plan& plan, const policy::Key* key, int64_t cost, core::Instant now,
                 std::span<store::Check> out);

// The store scope of a request's checks: "key:<id>", "account:<id>" (plans counted per account)
// or "ip:<address>".
std::string ScopeFor(const policy::Plan& plan, const policy::Key* key, std::string_view address);
// The same into `scope`, reusing its capacity (per request on the gateway's hot path).
void AssignScope(std::string& scope, const policy::Plan& plan, const policy::Key* key, std::string_view address);

}  // namespace tollgate::engine
