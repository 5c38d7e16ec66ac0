#include <tollgate/core/calendar.hpp>

#include <cstdio>

namespace tollgate::core {
namespace {

constexpr int64_t kMicrosPerDay = int64_t{86'400} * 1'000'000;

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && (a < 0)); }

}  // namespace

// Howard Hinnant's days_from_civil / civil_from_days (public-domain algorithms).
int64_t DaysFromCivil(CivilDate date) {
  const int64_t y = date.year - (date.month <= 2 ? 1 : 0);
  const int64_t era = FloorDiv(y, 400);
  const int64_t yoe = y - era * 400;
  const int64_t mp = (date.month + 9) % 12;
  const int64_t doy = (153 * mp + 2) / 5 + date.day - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

CivilDate CivilFromDays(int64_t days) {
  const int64_t z = days + 719468;
  const int64_t era = FloorDiv(z, 146097);
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int day = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  const int month = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  return CivilDate{yoe + era * 400 + (month <= 2 ? 1 : 0), month, day};
}

int64_t PeriodIndex(Period period, Instant t) {
  const int64_t days = FloorDiv(t.unix_micros(), kMicrosPerDay);
  if (period == Period::kDay) return days;
  const CivilDate d = CivilFromDays(days);
  return d.year * 12 + (d.month - 1);
}

Instant PeriodEnd(Period period, Instant t) {
  const int64_t days = FloorDiv(t.unix_micros(), kMicrosPerDay);
  if (period == Period::kDay) return Instant::FromUnixMicros((days + 1) * kMicrosPerDay);
  const CivilDate d = CivilFromDays(days);
  const CivilDate next =
      d.month == 12 ? CivilDate{d.year + 1, 1, 1} : CivilDate{d.year, d.month + 1, 1};
  return Instant::FromUnixMicros(DaysFromCivil(next) * kMicrosPerDay);
}

int64_t PeriodSeconds(Period period, Instant t) {
  if (period == Period::kDay) return 86'400;
  const CivilDate d = CivilFromDays(FloorDiv(t.unix_micros(), kMicrosPerDay));
  const int64_t start = DaysFromCivil(CivilDate{d.year, d.month, 1});
  return (PeriodEnd(period, t).unix_micros() / kMicrosPerDay - start) * 86'400;
}

std::string PeriodLabel(Period period, Instant t) {
  const CivilDate d = CivilFromDays(FloorDiv(t.unix_micros(), kMicrosPerDay));
  char buf[32];
  if (period == Period::kDay) {
    std::snprintf(buf, sizeof buf, "%04lld-%02d-%02d", static_cast<long long>(d.year), d.month,
                  d.day);
  } else {
    std::snprintf(buf, sizeof buf, "%04lld-%02d", static_cast<long long>(d.year), d.month);
  }
  return buf;
}

}  // namespace tollgate::core
