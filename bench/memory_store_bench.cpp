// Batches per second of MemoryStore::ApplyNow: one hot key, and 1,000,000 keys in random order.
//
// The stores are created once per process (function-local statics) and shared by the threads of
// a benchmark. Scope strings ("key:048213") are generated before timing, in shuffled order; the
// threads walk that list from different offsets, so every batch hits a random slot of the table
// while the list itself streams through the cache the way request data would.
//
// Time: unless the name says `StoreClock`, each batch carries an explicit `now` that advances by
// 1 us per batch and per thread (the server reads its clock once per request; this takes that
// read out of the measurement). The StoreClock variants leave Batch::now unset, so the store
// reads util::SystemClock on every call.
//
// Counters: items_per_second is batches per second of wall time summed over the threads;
// per_thread divides it by the thread count; allowed_ratio is the share of committed batches;
// bytes_per_key is MemoryBytes() / size() of the filled store. BM_DependentLoadFloor is not the
// store: it measures one dependent memory load over a table-sized buffer, the floor under
// BM_RandomKeys on the machine at hand.
//
// The `Batched` variants hand the same scopes, in the same order, to ApplyNowMany() in groups
// of `group` batches (one `now` each); items_per_second still counts batches.
//
//   build/bench/memory_store_bench --benchmark_filter=RandomKeys
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <benchmark/benchmark.h>

#include <tollgate/store/memory_store.hpp>

namespace tollgate::store {
namespace {

using core::Decision;
using core::Duration;
using core::Instant;
using core::Limit;

constexpr size_t kKeys = 1'000'000;
constexpr Duration kStep = Duration::Micros(1);

// The benchmarks' shared timeline, in Unix microseconds. Every run starts where the latest one
// ended, so the state a run finds in a store never lies in its future (a bucket would then
// refill nothing and the mix of decisions would drift from run to run).
std::atomic<int64_t>& Timeline() {
  static std::atomic<int64_t> us{Instant::FromUnixSeconds(1'790'000'000).unix_micros()};
  return us;
}

// One thread's clock for one run. Construct before the timing loop, where the framework's start
// barrier orders it before any thread of the run finishes.
class Ticker {
 public:
  Ticker() : now_(Instant::FromUnixMicros(Timeline().load())) {}
  ~Ticker() {
    int64_t seen = Timeline().load();
    while (seen < now_.unix_micros() &&
           !Timeline().compare_exchange_weak(seen, now_.unix_micros())) {
    }
  }
  Instant Next() {
    now_ = now_ + kStep;
    return now_;
  }

 private:
  Instant now_;
};

// 10 requests of burst, 10/s sustained: each random key is hit about once per simulated second
// per thread, so nearly every batch passes and writes its state back.
const Limit& Burst() {
  static const Limit limit = Limit::Create({.algorithm = core::Algorithm::kTokenBucket,
                                            .capacity = 10,
                                            .refill = core::Rate::Of(10, Duration::Seconds(1))})
                                 .value();
  return limit;
}

// The hot key takes 1 request per simulated microsecond per thread, and about 10 per real
// microsecond with the store's clock: a bucket that keeps up with both on two threads, so the
// measured path is the committing one.
const Limit& HotBurst() {
  static const Limit limit =
      Limit::Create({.algorithm = core::Algorithm::kTokenBucket,
                     .capacity = 1'000,
                     .refill = core::Rate::Of(50'000'000, Duration::Seconds(1))})
          .value();
  return limit;
}

// A daily hard quota far above what a run reaches.
const Limit& Daily() {
  static const Limit limit =
      Limit::Create({.algorithm = core::Algorithm::kQuota, .ceiling = int64_t{1} << 40}).value();
  return limit;
}

const std::array<Check, 1> kBurstOnly = {Check{"burst", &Burst(), 1}};
const std::array<Check, 2> kBurstAndDaily = {Check{"burst", &Burst(), 1},
                                             Check{"daily", &Daily(), 1}};
const std::array<Check, 1> kHotBurstOnly = {Check{"burst", &HotBurst(), 1}};
const std::array<Check, 2> kHotBurstAndDaily = {Check{"burst", &HotBurst(), 1},
                                                Check{"daily", &Daily(), 1}};

// kKeys distinct scopes "key:000000" .. "key:999999" in a seeded random order.
const std::vector<std::string>& Scopes() {
  static const std::vector<std::string> scopes = [] {
    std::vector<uint32_t> ids(kKeys);
    std::iota(ids.begin(), ids.end(), 0u);
    std::shuffle(ids.begin(), ids.end(), std::mt19937_64(42));
    std::vector<std::string> out;
    out.reserve(kKeys);
    char buf[16];
    for (uint32_t id : ids) {
      std::snprintf(buf, sizeof buf, "key:%06u", id);
      out.emplace_back(buf);
    }
    return out;
  }();
  return scopes;
}

// A store and what its fill measured.
struct Filled {
  MemoryStore store;
  double bytes_per_key = 0;
  double keys = 0;

  // `checks` per scope; max_keys leaves 10 % headroom over kKeys * checks so that no shard fills
  // up from the uneven spread of keys over shards (a full shard would evict during the run).
  Filled(std::span<const Check> checks, bool store_clock)
      : store(MemoryStoreOptions{.max_keys = kKeys * checks.size() * 11 / 10}) {
    Ticker ticker;
    std::array<Decision, 2> out;
    for (const std::string& scope : Scopes()) {
      Batch batch{.scope = scope, .checks = checks};
      if (!store_clock) batch.now = ticker.Next();
      (void)store.ApplyNow(batch, out);
    }
    keys = static_cast<double>(store.size());
    bytes_per_key = static_cast<double>(store.MemoryBytes()) / keys;
  }
};

void SetCounters(benchmark::State& state, int64_t committed) {
  state.SetItemsProcessed(state.iterations());
  state.counters["per_thread"] = benchmark::Counter(static_cast<double>(state.iterations()),
                                                    benchmark::Counter::kAvgThreadsRate);
  state.counters["allowed_ratio"] =
      benchmark::Counter(static_cast<double>(committed), benchmark::Counter::kAvgIterations);
}

void SetStoreCounters(benchmark::State& state, const Filled& filled) {
  // Counters are summed over threads: only thread 0 reports the store's.
  if (state.thread_index() != 0) return;
  state.counters["bytes_per_key"] = filled.bytes_per_key;
  state.counters["keys"] = filled.keys;
}

// One scope, all threads: the cost of the store's lock, hashing and table probe in cache. The
// scope has the same shape and length as the random ones.
void RunHotKey(benchmark::State& state, MemoryStore& store, std::span<const Check> checks,
               bool store_clock) {
  Ticker ticker;
  std::array<Decision, 2> out;
  int64_t committed = 0;
  for (auto _ : state) {
    Batch batch{.scope = "key:424242", .checks = checks};
    if (!store_clock) batch.now = ticker.Next();
    const ApplyResult r = store.ApplyNow(batch, out);
    committed += r.committed ? 1 : 0;
    benchmark::DoNotOptimize(out);
  }
  SetCounters(state, committed);
}

void RunRandomKeys(benchmark::State& state, Filled& filled, std::span<const Check> checks,
                   bool store_clock) {
  MemoryStore& store = filled.store;
  const std::vector<std::string>& scopes = Scopes();
  size_t i =
      kKeys / static_cast<size_t>(state.threads()) * static_cast<size_t>(state.thread_index());
  Ticker ticker;
  std::array<Decision, 2> out;
  int64_t committed = 0;
  for (auto _ : state) {
    Batch batch{.scope = scopes[i], .checks = checks};
    if (!store_clock) batch.now = ticker.Next();
    const ApplyResult r = store.ApplyNow(batch, out);
    committed += r.committed ? 1 : 0;
    benchmark::DoNotOptimize(out);
    if (++i == kKeys) i = 0;
  }
  SetCounters(state, committed);
  SetStoreCounters(state, filled);
}

// RunRandomKeys() with the batches handed to ApplyNowMany() in groups of state.range(0): the
// same scopes in the same order, one `now` per batch. items_per_second counts batches.
void RunRandomKeysBatched(benchmark::State& state, Filled& filled, std::span<const Check> checks) {
  constexpr size_t kMaxGroup = 64;
  MemoryStore& store = filled.store;
  const std::vector<std::string>& scopes = Scopes();
  const auto group = static_cast<size_t>(state.range(0));
  size_t i =
      kKeys / static_cast<size_t>(state.threads()) * static_cast<size_t>(state.thread_index());
  Ticker ticker;
  std::array<Batch, kMaxGroup> batches;
  std::array<Decision, kMaxGroup * 2> out;
  std::array<ApplyResult, kMaxGroup> results;
  int64_t committed = 0;
  for (auto _ : state) {
    for (size_t b = 0; b < group; ++b) {
      batches[b] = Batch{.scope = scopes[i], .checks = checks, .now = ticker.Next()};
      if (++i == kKeys) i = 0;
    }
    store.ApplyNowMany(std::span(batches).first(group), out, results);
    for (size_t b = 0; b < group; ++b) committed += results[b].committed ? 1 : 0;
    benchmark::DoNotOptimize(out);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.counters["per_thread"] =
      benchmark::Counter(static_cast<double>(state.iterations() * state.range(0)),
                         benchmark::Counter::kAvgThreadsRate);
  state.counters["allowed_ratio"] =
      benchmark::Counter(static_cast<double>(committed) / static_cast<double>(group),
                         benchmark::Counter::kAvgIterations);
  SetStoreCounters(state, filled);
}

// The stores of the random-key benchmarks, shared by the single and the batched variants.
Filled& BurstOnlyStore() {
  static Filled filled(kBurstOnly, false);
  return filled;
}

Filled& BurstAndDailyStore() {
  static Filled filled(kBurstAndDaily, false);
  return filled;
}

void BM_HotKey(benchmark::State& state) {
  static MemoryStore store;
  RunHotKey(state, store, kHotBurstOnly, false);
}
BENCHMARK(BM_HotKey)->Threads(1)->Threads(2)->UseRealTime();

void BM_HotKeyStoreClock(benchmark::State& state) {
  static MemoryStore store;
  RunHotKey(state, store, kHotBurstOnly, true);
}
BENCHMARK(BM_HotKeyStoreClock)->Threads(1)->Threads(2)->UseRealTime();

void BM_HotKeyBurstAndDaily(benchmark::State& state) {
  static MemoryStore store;
  RunHotKey(state, store, kHotBurstAndDaily, false);
}
BENCHMARK(BM_HotKeyBurstAndDaily)->Threads(1)->Threads(2)->UseRealTime();

void BM_RandomKeys(benchmark::State& state) {
  RunRandomKeys(state, BurstOnlyStore(), kBurstOnly, false);
}
BENCHMARK(BM_RandomKeys)->Threads(1)->Threads(2)->UseRealTime();

void BM_RandomKeysBatched(benchmark::State& state) {
  RunRandomKeysBatched(state, BurstOnlyStore(), kBurstOnly);
}
BENCHMARK(BM_RandomKeysBatched)->ArgName("group")->Arg(16)->Threads(1)->Threads(2)->UseRealTime();

void BM_RandomKeysStoreClock(benchmark::State& state) {
  static Filled filled(kBurstOnly, true);
  RunRandomKeys(state, filled, kBurstOnly, true);
}
BENCHMARK(BM_RandomKeysStoreClock)->Threads(1)->Threads(2)->UseRealTime();

void BM_RandomKeysBurstAndDaily(benchmark::State& state) {
  RunRandomKeys(state, BurstAndDailyStore(), kBurstAndDaily, false);
}
BENCHMARK(BM_RandomKeysBurstAndDaily)->Threads(1)->Threads(2)->UseRealTime();

void BM_RandomKeysBurstAndDailyBatched(benchmark::State& state) {
  RunRandomKeysBatched(state, BurstAndDailyStore(), kBurstAndDaily);
}
BENCHMARK(BM_RandomKeysBurstAndDailyBatched)
    ->ArgName("group")
    ->Arg(16)
    ->Arg(64)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// Not the store: the floor under BM_RandomKeys on this machine. One dependent load per iteration,
// chasing pointers through a random cycle of the 64-byte lines of a buffer as large as that
// benchmark's table (64 shards x 21,486 slots x 32 bytes = 44 MB). Arg: 1 = on transparent huge
// pages, as MemoryStore places its table; 0 = 4 KiB pages.
void BM_DependentLoadFloor(benchmark::State& state) {
  constexpr size_t kBytes = size_t{44} << 20;
  constexpr size_t kLine = 64;
  constexpr size_t kHugePage = size_t{2} << 20;
  static char* buffers[2] = {nullptr, nullptr};
  char*& buffer = buffers[state.range(0)];
  if (buffer == nullptr) {
    buffer = static_cast<char*>(std::aligned_alloc(kHugePage, kBytes));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)madvise(buffer, kBytes, state.range(0) == 1 ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
    std::vector<uint32_t> order(kBytes / kLine);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
    for (size_t i = 0; i < order.size(); ++i) {
      char* next = buffer + order[(i + 1) % order.size()] * kLine;
      std::memcpy(buffer + order[i] * kLine, &next, sizeof next);
    }
  }
  char* p = buffer;
  for (auto _ : state) {
    std::memcpy(&p, p, sizeof p);
  }
  benchmark::DoNotOptimize(p);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DependentLoadFloor)->ArgName("huge_pages")->Arg(1)->Arg(0);

}  // namespace
}  // namespace tollgate::store

BENCHMARK_MAIN();
