// UTC calendar periods for quotas: days and months, exact across month lengths and leap years.
#pragma once

#include <cstdint>
#include <string>

#include <tollgate/core/time.hpp>

namespace tollgate::core {

enum class Period : uint8_t { kDay, kMonth };

struct CivilDate {
  int64_t year;
  int month;  // 1..12
  int day;    // 1..31
  bool operator==(const CivilDate&) const = default;
};

// Days since 1970-01-01 of a proleptic Gregorian date, and back.
int64_t DaysFromCivil(CivilDate date);
CivilDate CivilFromDays(int64_t days);

// The period that contains `t`, as a number that grows by one each period
// (days since the epoch; or year * 12 + month - 1).
int64_t PeriodIndex(Period period, Instant t);
// The first instant of the period after the one containing `t`.
Instant PeriodEnd(Period period, Instant t);
// Seconds in the period containing `t` (86400; 28..31 days for months): `w` of a quota policy.
int64_t PeriodSeconds(Period period, Instant t);
// "2026-11-29" or "2026-11": the label of the period containing `t` in exports and keys.
std::string PeriodLabel(Period period, Instant t);

}  // namespace tollgate::core
