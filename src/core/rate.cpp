#include <tollgate/core/rate.hpp>

#include <cassert>
#include <numeric>
#include <string>

namespace tollgate::core {

Rate Rate::Of(int64_t tokens, Duration period) {
  assert(tokens > 0 && period.micros() > 0);
  const int64_t g = std::gcd(tokens, period.micros());
  return Rate{tokens / g, period.micros() / g};
}

Result<Rate> Rate::Parse(std::string_view text, int64_t period_seconds) {
  constexpr int64_t kMaxValue = int64_t{1} << 40;  // far beyond any real rate
  if (period_seconds <= 0) return Error{"period must be > 0"};
  int64_t whole = 0;
  int64_t frac = 0;
  int64_t scale = 1;
  bool dot = false;
  bool digits = false;
  for (char c : text) {
    if (c == '.' && !dot) {
      dot = true;
      continue;
    }
    if (c < '0' || c > '9')
      return Error{"must be a positive decimal number, got '" + std::string(text) + "'"};
    digits = true;
    if (dot) {
      if (scale == 1'000'000) return Error{"at most 6 decimals, got '" + std::string(text) + "'"};
      frac = frac * 10 + (c - '0');
      scale *= 10;
    } else {
      whole = whole * 10 + (c - '0');
      if (whole > kMaxValue) return Error{"too large: '" + std::string(text) + "'"};
    }
  }
  if (!digits) return Error{"must be a positive decimal number, got '" + std::string(text) + "'"};
  const int64_t tokens = whole * scale + frac;  // tokens per (scale * period) seconds
  if (tokens <= 0) return Error{"must be > 0, got '" + std::string(text) + "'"};
  return Of(tokens, Duration::Seconds(scale * period_seconds));
}

}  // namespace tollgate::core
