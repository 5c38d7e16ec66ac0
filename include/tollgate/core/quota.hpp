// Calendar quota: units used per UTC day or month, with a soft allowance and a hard ceiling.
#pragma once

#include <cstdint>
#include <optional>

#include <tollgate/core/calendar.hpp>
#include <tollgate/core/decision.hpp>
#include <tollgate/core/result.hpp>
#include <tollgate/core/state.hpp>
#include <tollgate/core/time.hpp>

namespace tollgate::core {

// Thread-safe (immutable; state passed in). State: a = period index, b = units used.
//
// An allowance counts and never rejects (usage beyond it is reported as over_allowance); a
// ceiling rejects until the period ends. With an allowance and a ceiling a rejection is
// kCeilingExceeded; a quota with only a ceiling is a plain hard quota (kQuotaExceeded). With
// neither, usage is metered and nothing is rejected (unlimited plans).
class Quota {
 public:
  static Result<Quota> Create(Period period, std::optional<int64_t> allowance,
                              std::optional<int64_t> ceiling);
  // Counts `cost` in `state` when allowed.
  Decision Evaluate(State& state, int64_t cost, Instant now) const;
  // The end of the period the state counts.
  Instant ExpiresAt(const State& state) const;

  Period period() const { return period_; }
  // q of the policy: the allowance, or else the ceiling; 0 when unlimited.
  int64_t limit() const { return allowance_.value_or(ceiling_.value_or(0)); }
  std::optional<int64_t> allowance() const { return allowance_; }
  std::optional<int64_t> ceiling() const { return ceiling_; }

 private:
  Quota(Period period, std::optional<int64_t> allowance, std::optional<int64_t> ceiling)
      : period_(period), allowance_(allowance), ceiling_(ceiling) {}
  Period period_;
  std::optional<int64_t> allowance_;
  std::optional<int64_t> ceiling_;
};

}  // namespace tollgate::core
