// Decisions per second and latency through RedisStore (and the deny cache), against a real
// Redis: `concurrency` decisions in flight at once, each completion issuing the next.
//   redis_store_bench --url redis://127.0.0.1:PORT [--keys N] [--concurrency C] [--seconds S]
//                     [--limit L] [--deny-cache] [--lane] [--tls-ca FILE]
// --keys 1 is one hot key; --limit is the bucket capacity and refill per second (default: so
// large that nothing is rejected; a small one measures a flood). --lane: as the gateway uses the
// store, decisions are issued and completed on one event loop with a lane of its own
// (RedisStore::AddLane); without it, they are issued from this thread and complete on the store's.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <tollgate/engine/deny_cache.hpp>
#include <tollgate/store/redis_store.hpp>

using namespace tollgate;
using Clock = std::chrono::steady_clock;

namespace {

struct Slot {
  std::string scope;
  store::Check check;
  core::Decision decision;
  Clock::time_point sent;
};

}  // namespace

int main(int argc, char** argv) {
  std::string url = "redis://127.0.0.1:6379";
  std::string tls_ca;  // with a rediss:// url
  int keys = 1, concurrency = 50, seconds = 5;
  int64_t limit = 1'000'000'000;
  bool deny_cache = false;
  bool lane = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--url")
      url = next();
    else if (a == "--keys")
      keys = std::atoi(next().c_str());
    else if (a == "--concurrency")
      concurrency = std::atoi(next().c_str());
    else if (a == "--seconds")
      seconds = std::atoi(next().c_str());
    else if (a == "--limit")
      limit = std::atoll(next().c_str());
    else if (a == "--deny-cache")
      deny_cache = true;
    else if (a == "--lane")
      lane = true;
    else if (a == "--tls-ca")
      tls_ca = next();
    else if (a == "--print-script") {
      const std::string_view script = store::RedisStore::Script();
      std::fwrite(script.data(), 1, script.size(), stdout);
      return 0;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  auto redis = store::RedisStore::Create(
      {.url = url, .prefix = "bench", .timeout_ms = 1000, .tls_ca_file = tls_ca});
  if (!redis) {
    std::fprintf(stderr, "%s\n", redis.error().c_str());
    return 1;
  }
  std::unique_ptr<engine::DenyCache> cache;
  store::Store* store = redis->get();
  if (deny_cache) {
    cache = std::make_unique<engine::DenyCache>(**redis);
    store = cache.get();
  }
  const core::Limit bucket =
      core::Limit::Create({.algorithm = core::Algorithm::kTokenBucket,
                           .capacity = limit,
                           .refill = core::Rate::Of(limit, core::Duration::Seconds(1))})
          .value();

  std::mutex mu;
  std::condition_variable cv;
  std::vector<int64_t> latencies_us;
  latencies_us.reserve(1 << 22);
  std::atomic<int64_t> done{0}, allowed{0}, errors{0};
  std::atomic<bool> stop{false};
  std::atomic<int> in_flight{0};
  std::mt19937_64 rng(42);
  std::vector<Slot> slots(static_cast<size_t>(concurrency));
  std::vector<size_t> ready;
  boost::asio::io_context loop(1);
  if (lane) (*redis)->EnterLane((*redis)->AddLane(loop));
  bool measuring_done = false;  // --lane: the loop's own flag

  std::function<void(size_t)> issue = [&](size_t i) {
    Slot& s = slots[i];
    {
      std::lock_guard lock(mu);
      s.scope = "key:" + std::to_string(
                             keys == 1 ? 0 : static_cast<int>(rng() % static_cast<uint64_t>(keys)));
    }
    s.check = store::Check{"burst", &bucket, 1, true};
    s.sent = Clock::now();
    in_flight.fetch_add(1);
    store->Apply(store::Batch{.scope = s.scope, .checks = {&s.check, 1}}, {&s.decision, 1},
                 [&, i](store::ApplyResult&& r) {
                   Slot& slot = slots[i];
                   const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(
                                          Clock::now() - slot.sent)
                                          .count();
                   {
                     std::lock_guard lock(mu);
                     latencies_us.push_back(us);
                   }
                   done.fetch_add(1);
                   if (r.error != store::StoreErrc::kOk) errors.fetch_add(1);
                   if (r.committed) allowed.fetch_add(1);
                   if (lane) {
                     // Posted, not called: the deny cache completes inside Apply().
                     const bool last_one = in_flight.fetch_sub(1) == 1;
                     if (!measuring_done) {
                       boost::asio::post(loop, [&, i] { issue(i); });
                     } else if (last_one) {
                       loop.stop();
                     }
                     return;
                   }
                   const bool last = in_flight.fetch_sub(1) == 1;
                   bool wake;
                   {
                     // Re-issued from the main loop: the deny cache completes at once, inside
                     // Apply(), and issuing from here would recurse without end.
                     std::lock_guard lock(mu);
                     wake = ready.empty();
                     ready.push_back(i);
                   }
                   // One wake-up per batch of completions, not one futex call per decision (the
                   // harness's cost, not the store's).
                   if (wake || last) cv.notify_all();
                 });
  };
  // Issues every slot whose decision came back, until `until`.
  auto pump = [&](Clock::time_point until) {
    while (Clock::now() < until) {
      std::vector<size_t> batch;
      {
        std::unique_lock lock(mu);
        cv.wait_for(lock, std::chrono::milliseconds(5), [&] { return !ready.empty(); });
        batch.swap(ready);
      }
      for (size_t i : batch) issue(i);
    }
  };
  // Warm up (connect, load the script), then measure.
  int64_t done0 = 0, allowed0 = 0, errors0 = 0, done1 = 0;
  Clock::time_point t0, t1;
  auto start_measuring = [&] {
    std::lock_guard lock(mu);
    latencies_us.clear();
    done0 = done.load(), allowed0 = allowed.load(), errors0 = errors.load();
    t0 = Clock::now();
  };
  if (lane) {
    for (size_t i = 0; i < slots.size(); ++i) boost::asio::post(loop, [&, i] { issue(i); });
    boost::asio::steady_timer warm(loop, std::chrono::milliseconds(500));
    boost::asio::steady_timer end(loop,
                                  std::chrono::milliseconds(500) + std::chrono::seconds(seconds));
    warm.async_wait([&](const boost::system::error_code&) { start_measuring(); });
    end.async_wait([&](const boost::system::error_code&) {
      t1 = Clock::now();
      done1 = done.load();
      measuring_done = true;
    });
    loop.run_until(Clock::now() + std::chrono::milliseconds(500) +
                   std::chrono::seconds(seconds + 5));
    (*redis)->CloseLanes();
  } else {
    for (size_t i = 0; i < slots.size(); ++i) issue(i);
    pump(Clock::now() + std::chrono::milliseconds(500));
    start_measuring();
    pump(t0 + std::chrono::seconds(seconds));
    t1 = Clock::now();
    done1 = done.load();
    stop.store(true);
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(5), [&] { return in_flight.load() == 0; });
  }
  const int64_t n = done1 - done0;
  std::vector<int64_t> lat;
  {
    std::lock_guard lock(mu);
    lat = latencies_us;
  }
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double p) {
    return lat.empty() ? 0
                       : lat[std::min(lat.size() - 1,
                                      static_cast<size_t>(p * static_cast<double>(lat.size())))];
  };
  const double secs = std::chrono::duration<double>(t1 - t0).count();
  std::printf(
      "RESULT lane=%d keys=%d concurrency=%d deny_cache=%d decisions_per_s=%.0f allowed_per_s=%.0f "
      "errors=%lld p50_us=%lld p99_us=%lld max_us=%lld redis_calls=%llu\n",
      lane ? 1 : 0, keys, concurrency, deny_cache ? 1 : 0, static_cast<double>(n) / secs,
      static_cast<double>(allowed.load() - allowed0) / secs,
      static_cast<long long>(errors.load() - errors0), static_cast<long long>(pct(0.5)),
      static_cast<long long>(pct(0.99)), static_cast<long long>(lat.empty() ? 0 : lat.back()),
      static_cast<unsigned long long>((*redis)->stats().calls.load()));
  return 0;
}
