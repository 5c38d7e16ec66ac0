// A refill rate as an exact fraction: `tokens` every `per` microseconds.
#pragma once

#include <cstdint>
#include <string_view>

#include <tollgate/core/result.hpp>
#include <tollgate/core/time.hpp>

namespace tollgate::core {

// Thread-safe (a value type). Kept as a reduced fraction so that no floating-point error
// accumulates: 0.5 tokens/s is 1 token per 2,000,000 us.
struct Rate {
  int64_t tokens = 0;      // > 0
  int64_t per_micros = 0;  // > 0

  // Parses a decimal number of tokens ("0.5", "50", "0.001"; at most 6 decimals) per
  // `period_seconds` (1 for per-second rates, 60 for per-minute ...).
  static Result<Rate> Parse(std::string_view decimal, int64_t period_seconds);
  // `tokens` per `period`. REQUIRES: tokens > 0, period > 0.
  static Rate Of(int64_t tokens, Duration period);

  bool operator==(const Rate&) const = default;
};

}  // namespace tollgate::core
