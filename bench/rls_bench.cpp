// Envoy RLS v3 over gRPC: ShouldRateLimit calls per second and latency, real gRPC over loopback
// against an in-process RlsServer on the memory store.
//   rls_bench [--threads T] [--seconds S] [--keys N]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include <tollgate/rls/rls_server.hpp>
#include <tollgate/store/memory_store.hpp>

#include "rls.grpc.pb.h"

using namespace tollgate;
namespace pb = envoy::service::ratelimit::v3;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  int threads = 8, seconds = 5, keys = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (a == "--seconds")
      seconds = std::atoi(argv[i + 1]);
    else if (a == "--keys")
      keys = std::atoi(argv[i + 1]);
  }
  std::string yaml =
      "plans: {bench: {limits: [{name: burst, capacity: 1000000000, refill_per_second: "
      "1000000000}]}}\nkeys:\n";
  for (int k = 0; k < keys; ++k)
    yaml +=
        "  - {key: key-" + std::to_string(k) + ", id: k" + std::to_string(k) + ", plan: bench}\n";
  auto config = config::ParseConfig(yaml);
  auto policy = *policy::Policy::Build(std::move(config).value());
  store::MemoryStore memory;
  engine::Engine engine(memory);
  rls::RlsServer server(
      {.listen = "127.0.0.1:0", .domains = {{.domain = "api", .key_entry = "api_key"}}}, engine,
      [policy] { return policy; });
  const int port = *server.Start();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> calls{0};
  std::mutex mu;
  std::vector<int64_t> lat;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      auto stub = pb::RateLimitService::NewStub(grpc::CreateChannel(
          "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
      std::vector<int64_t> mine;
      for (uint64_t i = static_cast<uint64_t>(t); !stop.load();
           i += static_cast<uint64_t>(threads)) {
        pb::RateLimitRequest req;
        req.set_domain("api");
        auto* e = req.add_descriptors()->add_entries();
        e->set_key("api_key");
        e->set_value("key-" + std::to_string(i % static_cast<uint64_t>(keys)));
        pb::RateLimitResponse res;
        grpc::ClientContext ctx;
        const auto t0 = Clock::now();
        if (stub->ShouldRateLimit(&ctx, req, &res).ok()) {
          mine.push_back(
              std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
          calls.fetch_add(1);
        }
      }
      std::lock_guard lock(mu);
      lat.insert(lat.end(), mine.begin(), mine.end());
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));  // warm up
  const int64_t c0 = calls.load();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const int64_t n = calls.load() - c0;
  stop.store(true);
  for (auto& th : pool) th.join();
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double p) {
    return lat.empty() ? 0
                       : lat[std::min(lat.size() - 1,
                                      static_cast<size_t>(p * static_cast<double>(lat.size())))];
  };
  std::printf("RESULT threads=%d keys=%d calls_per_s=%.0f p50_us=%lld p99_us=%lld\n", threads, keys,
              static_cast<double>(n) / secs, static_cast<long long>(pct(0.5)),
              static_cast<long long>(pct(0.99)));
  server.Shutdown();
  return 0;
}
