// The outcome of one check: a value, never an error (being over the limit is not a failure).
#pragma once

#include <cstdint>
#include <string_view>

#include <tollgate/core/time.hpp>

namespace tollgate::core {

// Why a request was rejected. The names are the stable `code` of the 429 body.
enum class RejectCode : uint8_t {
  kNone,                 // allowed
  kRateLimited,          // a burst or window limit
  kQuotaExceeded,        // a calendar quota without a separate allowance
  kCeilingExceeded,      // the hard ceiling above a soft allowance
  kCostExceedsCapacity,  // the request can never pass: cost > capacity (no Retry-After)
};

std::string_view RejectCodeName(RejectCode code);

// Thread-safe (a value type).
struct Decision {
  bool allowed = true;
  RejectCode code = RejectCode::kNone;
  // q of the policy: bucket capacity, window limit, quota allowance (or hard limit).
  int64_t limit = 0;
  // Whole units left after this decision (floor), never negative.
  int64_t remaining = 0;
  // Time until the state has fully recovered: bucket full, window empty, period over.
  Duration reset;
  // Rejected only: the wait until the same request would pass. Infinite() for
  // kCostExceedsCapacity; zero when allowed.
  Duration retry_after;
  // Quotas: units counted in the current period after this decision.
  int64_t used = 0;
  // Quotas with an allowance: usage is beyond the allowance (reported, not rejected).
  bool over_allowance = false;
  // Allowed, smoothed (a token bucket with `on_limit: delay`): the request has its slot, and is
  // to be held this long before it is served. Zero otherwise.
  Duration delay;
};

}  // namespace tollgate::core
