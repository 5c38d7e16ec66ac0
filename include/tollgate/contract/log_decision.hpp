// What the gateway decided for one request, as the access log names it (its "decision" field)
// and `tollgate replay` reads it back: one enum, one name table (issue 32, part 5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include <tollgate/util/name_table.hpp>

namespace tollgate::contract {

enum class LogDecision : uint8_t {
  kNone,            // answered before any decision (a 4xx of the request itself)
  kAllowed,         // every enforced check allowed
  kRejected,        // an enforced check rejected: 429 (or the decision listener's status)
  kShadowRejected,  // allowed, but a check in shadow mode would have rejected
  kLocalAllowed,    // the store failed; this replica's share allowed (fail_mode: local)
  kLocalRejected,   // the same, rejected
  kDegraded,        // the store failed; allowed (fail_mode: open)
  kUnavailable,     // the store failed; 503 limiter_unavailable (fail_mode: closed)
  kBlocked,         // the deny list: 403 blocked
  kInvalidKey,      // no key or an unknown one: 401, or 429 past the invalid-key limit
  kStatus,          // GET /v1/rate-limit answered; nothing consumed
};

inline constexpr util::NameTable<LogDecision, 11> kLogDecisionNames = {{
    {LogDecision::kNone, "none"},
    {LogDecision::kAllowed, "allowed"},
    {LogDecision::kRejected, "rejected"},
    {LogDecision::kShadowRejected, "shadow_rejected"},
    {LogDecision::kLocalAllowed, "local_allowed"},
    {LogDecision::kLocalRejected, "local_rejected"},
    {LogDecision::kDegraded, "degraded"},
    {LogDecision::kUnavailable, "unavailable"},
    {LogDecision::kBlocked, "blocked"},
    {LogDecision::kInvalidKey, "invalid_key"},
    {LogDecision::kStatus, "status"},
}};
static_assert(util::IsDense(kLogDecisionNames));

inline std::string_view NameOf(LogDecision d) {
  return kLogDecisionNames[static_cast<size_t>(d)].name;
}

// The decision an access-log name stands for; nullopt for a name tollgate never writes.
inline std::optional<LogDecision> ParseLogDecision(std::string_view name) {
  return util::ValueOf(kLogDecisionNames, name);
}

// Whether the request was refused by a limit (enforced, or a replica's own while the store was
// down).
inline bool IsRejection(LogDecision d) {
  return d == LogDecision::kRejected || d == LogDecision::kLocalRejected;
}

}  // namespace tollgate::contract
