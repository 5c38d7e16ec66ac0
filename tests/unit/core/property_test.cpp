// Seeded random request sequences against tiny reference models written straight from the
// formulas of DESIGN.md.
#include <tollgate/core/limit.hpp>

#include <deque>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace tollgate::core {
namespace {

const Instant kT0 = Instant::FromUnixSeconds(1'790'000'000);

struct Accepted {
  int64_t at_us;
  int64_t cost;
};

// B(t) = min(C, B(t0) + r (t - t0)), in units of 1/per_micros token, with 128-bit integers.
class ReferenceBucket {
 public:
  ReferenceBucket(int64_t capacity, Rate rate)
      : c_(capacity), rate_(rate), level_(static_cast<__int128>(capacity) * rate.per_micros) {}
  bool TryAcquire(int64_t cost, int64_t now_us) {
    const __int128 full = static_cast<__int128>(c_) * rate_.per_micros;
    if (now_us > last_) level_ += static_cast<__int128>(rate_.tokens) * (now_us - last_);
    if (level_ > full) level_ = full;
    last_ = std::max(last_, now_us);
    const __int128 need = static_cast<__int128>(cost) * rate_.per_micros;
    if (level_ < need) return false;
    level_ -= need;
    return true;
  }

 private:
  int64_t c_;
  Rate rate_;
  __int128 level_;
  int64_t last_ = 0;
};

TEST(TokenBucketProperty, MatchesFormulaAndNeverExceedsCPlusRT) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    const int64_t capacity = 1 + static_cast<int64_t>(rng() % 50);
    const char* rates[] = {"0.5", "1", "3", "7.25", "50", "0.016667"};
    const Rate rate = Rate::Parse(rates[rng() % std::size(rates)], 1).value();
    const Limit limit =
        Limit::Create({.algorithm = Algorithm::kTokenBucket, .capacity = capacity, .refill = rate})
            .value();
    ReferenceBucket ref(capacity, rate);
    State state;
    int64_t now = kT0.unix_micros();
    std::vector<Accepted> accepted;
    for (int i = 0; i < 3000; ++i) {
      now += static_cast<int64_t>(rng() % 400'000);
      const int64_t cost = 1 + static_cast<int64_t>(rng() % 4);
      State before = state;
      const Decision d = limit.Evaluate(state, cost, Instant::FromUnixMicros(now));
      ASSERT_EQ(d.allowed, ref.TryAcquire(cost, now)) << "seed " << seed << " step " << i;
      if (d.allowed) {
        accepted.push_back({now, cost});
      } else if (d.code == RejectCode::kRateLimited) {
        // Retry-After is honest: exactly then, not a microsecond earlier.
        State a = before, b = before;
        const Instant at = Instant::FromUnixMicros(now) + d.retry_after;
        ASSERT_TRUE(limit.Evaluate(a, cost, at).allowed);
        ASSERT_FALSE(limit.Evaluate(b, cost, at - Duration::Micros(1)).allowed);
      }
    }
    // Over every interval [t_i, t_j] the accepted cost is at most C + r (t_j - t_i).
    for (size_t i = 0; i < accepted.size(); ++i) {
      __int128 sum = 0;
      for (size_t j = i; j < accepted.size(); ++j) {
        sum += accepted[j].cost;
        const __int128 bound_units =
            static_cast<__int128>(capacity) * rate.per_micros +
            static_cast<__int128>(rate.tokens) * (accepted[j].at_us - accepted[i].at_us);
        ASSERT_LE(sum * rate.per_micros, bound_units) << "seed " << seed;
      }
    }
  }
}

TEST(SlidingLogProperty, MatchesExactRollingCount) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    const int64_t max = 1 + static_cast<int64_t>(rng() % 30);
    const Duration window = Duration::Millis(100 + static_cast<int64_t>(rng() % 5000));
    const Limit limit =
        Limit::Create({.algorithm = Algorithm::kSlidingWindowLog, .limit = max, .window = window})
            .value();
    LogState state;
    std::vector<Accepted> accepted;
    int64_t now = kT0.unix_micros();
    for (int i = 0; i < 3000; ++i) {
      now += static_cast<int64_t>(rng() % 200'000);
      const int64_t cost = 1 + static_cast<int64_t>(rng() % 3);
      int64_t in_window = 0;
      for (const Accepted& a : accepted) {
        if (a.at_us > now - window.micros()) in_window += a.cost;
      }
      const bool expect = in_window + cost <= max;
      const Decision peek = limit.Peek(state, cost, Instant::FromUnixMicros(now));
      const Decision d = limit.Evaluate(state, cost, Instant::FromUnixMicros(now));
      ASSERT_EQ(peek.allowed, d.allowed);
      ASSERT_EQ(d.allowed, expect) << "seed " << seed << " step " << i;
      if (d.allowed) accepted.push_back({now, cost});
      if (!d.allowed && cost <= max) {
        // After Retry-After, the reference count leaves room for the request.
        const int64_t at = now + d.retry_after.micros();
        int64_t later = 0;
        for (const Accepted& a : accepted) later += a.at_us > at - window.micros() ? a.cost : 0;
        ASSERT_LE(later + cost, max);
        int64_t before = 0;
        for (const Accepted& a : accepted)
          before += a.at_us > at - 1 - window.micros() ? a.cost : 0;
        ASSERT_GT(before + cost, max);
      }
    }
  }
}

TEST(WindowProperty, FixedAndSlidingCounterMatchTheirFormulas) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    const int64_t max = 1 + static_cast<int64_t>(rng() % 30);
    const int64_t w_ms = 100 + static_cast<int64_t>(rng() % 5000);
    const Limit fixed =
        Limit::Create(
            {.algorithm = Algorithm::kFixedWindow, .limit = max, .window = Duration::Millis(w_ms)})
            .value();
    const Limit sliding = Limit::Create({.algorithm = Algorithm::kSlidingWindowCounter,
                                         .limit = max,
                                         .window = Duration::Millis(w_ms)})
                              .value();
    State fs, ss;
    std::vector<Accepted> fixed_ok, sliding_ok;
    int64_t now = kT0.unix_micros();
    auto sum_in = [](const std::vector<Accepted>& v, int64_t index, int64_t w_us) {
      int64_t s = 0;
      for (const Accepted& a : v) s += a.at_us / w_us == index ? a.cost : 0;
      return s;
    };
    for (int i = 0; i < 3000; ++i) {
      now += static_cast<int64_t>(rng() % 100'000);
      const int64_t cost = 1 + static_cast<int64_t>(rng() % 3);
      const int64_t w_us = w_ms * 1000;
      const int64_t index = now / w_us;
      // Fixed: count in this window.
      const bool fixed_expect = sum_in(fixed_ok, index, w_us) + cost <= max;
      const Decision fd = fixed.Evaluate(fs, cost, Instant::FromUnixMicros(now));
      ASSERT_EQ(fd.allowed, fixed_expect) << "seed " << seed << " step " << i;
      if (fd.allowed) fixed_ok.push_back({now, cost});
      // Sliding counter: prev * (1 - elapsed/W) + curr + cost <= limit, elapsed in whole ms.
      const long double elapsed = static_cast<long double>((now / 1000) % w_ms);
      const long double estimate = sum_in(sliding_ok, index - 1, w_us) * (1.0L - elapsed / w_ms) +
                                   sum_in(sliding_ok, index, w_us);
      const Decision sd = sliding.Evaluate(ss, cost, Instant::FromUnixMicros(now));
      if (std::abs(static_cast<double>(estimate + cost - max)) > 1e-9) {
        ASSERT_EQ(sd.allowed, estimate + cost <= max) << "seed " << seed << " step " << i;
      }
      if (sd.allowed) sliding_ok.push_back({now, cost});
    }
  }
}

}  // namespace
}  // namespace tollgate::core
