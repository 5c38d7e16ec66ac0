#include <tollgate/core/quota.hpp>

#include <algorithm>

namespace tollgate::core {

Result<Quota> Quota::Create(Period period, std::optional<int64_t> allowance,
                            std::optional<int64_t> ceiling) {
  constexpr int64_t kMax = int64_t{1} << 53;
  if (allowance && (*allowance <= 0 || *allowance > kMax)) return Error{"allowance: must be > 0"};
  if (ceiling && (*ceiling <= 0 || *ceiling > kMax)) return Error{"ceiling: must be > 0"};
  if (allowance && ceiling && *ceiling < *allowance) {
    return Error{"ceiling: must be >= allowance"};
  }
  return Quota(period, allowance, ceiling);
}

Decision Quota::Evaluate(State& state, int64_t cost, Instant now) const {
  const int64_t index = PeriodIndex(period_, now);
  const int64_t used = state.a == index ? state.b : 0;
  Decision d;
  d.limit = limit();
  d.reset = PeriodEnd(period_, now) - now;
  const RejectCode code = allowance_ ? RejectCode::kCeilingExceeded : RejectCode::kQuotaExceeded;
  if (ceiling_ && cost > *ceiling_) {
    d.allowed = false;
    d.code = RejectCode::kCostExceedsCapacity;
    d.retry_after = Duration::Infinite();
    d.used = used;
  } else if (!ceiling_ || used + cost <= *ceiling_) {
    state.a = index;
    state.b = used + cost;
    d.used = state.b;
  } else {
    d.allowed = false;
    d.code = code;
    d.retry_after = d.reset;
    d.used = used;
  }
  d.remaining = std::max<int64_t>(0, d.limit - d.used);
  d.over_allowance = allowance_ && d.used > *allowance_;
  return d;
}

Instant Quota::ExpiresAt(const State& state) const {
  // state.a is a day index or a month index (year * 12 + month - 1).
  if (period_ == Period::kDay) return Instant::FromUnixSeconds((state.a + 1) * 86'400);
  const int64_t year = state.a / 12;
  const int month = static_cast<int>(state.a % 12) + 1;
  const CivilDate next = month == 12 ? CivilDate{year + 1, 1, 1} : CivilDate{year, month + 1, 1};
  return Instant::FromUnixSeconds(DaysFromCivil(next) * 86'400);
}

}  // namespace tollgate::core
