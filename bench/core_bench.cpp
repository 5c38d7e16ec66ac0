// Decisions per second of the pure limiter math (no store, no locks, no clock reads).
//
// Every iteration advances `now` by 1 us, so each decision sees new time and refills, rolls
// windows or drops log entries as it would under a steady 1,000,000 requests/s on one key. The
// algorithms live in another translation unit and are called through their public API, as the
// stores call them. Parameters are chosen so that part of the requests are rejected; the counter
// `allowed_ratio` shows the mix each benchmark measured.
//
//   build/bench/core_bench --benchmark_filter=TokenBucket
#include <benchmark/benchmark.h>

#include <cstdint>
#include <tollgate/core/limit.hpp>

namespace tollgate::core {
namespace {

// 2026-09-21T14:13:20Z: a realistic place on the timeline (quotas compute calendar dates from it).
constexpr Instant kStart = Instant::FromUnixSeconds(1'790'000'000);
constexpr Duration kStep = Duration::Micros(1);

// Runs `evaluate(now)` once per iteration with `now` advancing by kStep.
template <class Evaluate>
void RunDecisions(benchmark::State& state, Evaluate evaluate) {
  Instant now = kStart;
  int64_t allowed = 0;
  for (auto _ : state) {
    now = now + kStep;
    Decision d = evaluate(now);
    allowed += d.allowed ? 1 : 0;
    benchmark::DoNotOptimize(d);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["allowed_ratio"] =
      static_cast<double>(allowed) / static_cast<double>(state.iterations());
}

Limit MustCreate(const LimitSpec& spec) { return Limit::Create(spec).value(); }

// Arg: refill per second. 2,000,000/s keeps up with 1 request/us (all allowed); 500,000/s
// rejects about half of them.
void BM_TokenBucketDirect(benchmark::State& state) {
  const TokenBucket bucket =
      TokenBucket::Create(100, Rate::Of(state.range(0), Duration::Seconds(1))).value();
  State s;
  RunDecisions(state, [&](Instant now) { return bucket.Evaluate(s, 1, now); });
}
BENCHMARK(BM_TokenBucketDirect)->ArgName("refill_per_s")->Arg(2'000'000)->Arg(500'000);

void BM_TokenBucketViaLimit(benchmark::State& state) {
  const Limit limit = MustCreate({.algorithm = Algorithm::kTokenBucket,
                                  .capacity = 100,
                                  .refill = Rate::Of(state.range(0), Duration::Seconds(1))});
  State s;
  RunDecisions(state, [&](Instant now) { return limit.Evaluate(s, 1, now); });
}
BENCHMARK(BM_TokenBucketViaLimit)->ArgName("refill_per_s")->Arg(2'000'000)->Arg(500'000);

// The store calls ExpiresAt() after every allowed decision; this is that pair.
void BM_TokenBucketViaLimitWithExpiry(benchmark::State& state) {
  const Limit limit = MustCreate({.algorithm = Algorithm::kTokenBucket,
                                  .capacity = 100,
                                  .refill = Rate::Of(500'000, Duration::Seconds(1))});
  State s;
  RunDecisions(state, [&](Instant now) {
    const Decision d = limit.Evaluate(s, 1, now);
    Instant expires = limit.ExpiresAt(s);
    benchmark::DoNotOptimize(expires);
    return d;
  });
}
BENCHMARK(BM_TokenBucketViaLimitWithExpiry);

// 600 per 1 ms window at 1,000 requests per window: 60 % allowed.
void BM_FixedWindow(benchmark::State& state) {
  const Limit limit = MustCreate(
      {.algorithm = Algorithm::kFixedWindow, .limit = 600, .window = Duration::Millis(1)});
  State s;
  RunDecisions(state, [&](Instant now) { return limit.Evaluate(s, 1, now); });
}
BENCHMARK(BM_FixedWindow);

// 6,000 per 10 ms window at 10,000 requests per window.
void BM_SlidingCounter(benchmark::State& state) {
  const Limit limit = MustCreate({.algorithm = Algorithm::kSlidingWindowCounter,
                                  .limit = 6'000,
                                  .window = Duration::Millis(10)});
  State s;
  RunDecisions(state, [&](Instant now) { return limit.Evaluate(s, 1, now); });
}
BENCHMARK(BM_SlidingCounter);

// Arg: 0 = daily, 1 = monthly (civil-date arithmetic on every call). The allowance is passed
// after the first 1,000,000 requests (reported as over_allowance); the ceiling is never reached,
// so every request counts and the mix does not depend on the iteration count.
void BM_Quota(benchmark::State& state) {
  const Limit limit = MustCreate({.algorithm = Algorithm::kQuota,
                                  .period = state.range(0) == 0 ? Period::kDay : Period::kMonth,
                                  .allowance = 1'000'000,
                                  .ceiling = int64_t{1} << 40});
  State s;
  RunDecisions(state, [&](Instant now) { return limit.Evaluate(s, 1, now); });
}
BENCHMARK(BM_Quota)->ArgName("monthly")->Arg(0)->Arg(1);

// Arg: the limit; the window holds limit / 0.6 requests, so the log stays full (size = limit)
// and 60 % of the requests pass, each dropping the entry that left the window.
void BM_SlidingLog(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Limit limit = MustCreate({.algorithm = Algorithm::kSlidingWindowLog,
                                  .limit = n,
                                  .window = Duration::Micros(n * 10 / 6)});
  LogState log;
  RunDecisions(state, [&](Instant now) { return limit.Evaluate(log, 1, now); });
}
BENCHMARK(BM_SlidingLog)->ArgName("limit")->Arg(60)->Arg(6'000);

}  // namespace
}  // namespace tollgate::core

BENCHMARK_MAIN();
