// What making the request target canonical costs per request (src/http/target.cpp): the fast
// path (a target already canonical: one pass, views into it) and the full rewrite (anything to
// decode, a dot segment, absolute-form), with a buffer reused as a connection reuses its own.
//
//   build/bench/target_bench
#include <benchmark/benchmark.h>

#include <string>
#include <tollgate/util/target.hpp>

namespace tollgate::util {
namespace {

void Run(benchmark::State& state, std::string_view raw) {
  const TargetOptions options;
  std::string buffer;
  buffer.reserve(256);
  CanonicalTarget out;
  for (auto _ : state) {
    const char* error = CanonicalizeTarget("GET", raw, options, buffer, out);
    benchmark::DoNotOptimize(error);
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * raw.size()));
}

void BM_FastShort(benchmark::State& state) { Run(state, "/v1/items?page=2"); }
BENCHMARK(BM_FastShort);

void BM_FastTypical(benchmark::State& state) {
  Run(state,
      "/v1/accounts/acct_1234567890/invoices/inv_0987654321/lines?expand=tax&limit=100&page=3");
}
BENCHMARK(BM_FastTypical);

void BM_FastLong(benchmark::State& state) {  // a 1 KB query (filters, ids)
  std::string raw = "/v1/items/search?";
  while (raw.size() < 1024) raw += "id=abcdef0123456789&";
  Run(state, raw);
}
BENCHMARK(BM_FastLong);

void BM_SlowEncoded(benchmark::State& state) {  // percent-encoded bytes: decoded or uppercased
  Run(state, "/v1/search/caf%c3%a9?q=na%C3%AFve+caf%c3%a9&limit=10");
}
BENCHMARK(BM_SlowEncoded);

void BM_SlowDotSegments(benchmark::State& state) {
  Run(state, "/public/%2e%2e/v1/items/./x//y?pag%65s=5000");
}
BENCHMARK(BM_SlowDotSegments);

void BM_SlowAbsoluteForm(benchmark::State& state) {  // Boost.URL parses the authority
  Run(state, "http://api.example.com:8080/v1/items?page=2");
}
BENCHMARK(BM_SlowAbsoluteForm);

void BM_Refused(benchmark::State& state) { Run(state, "/public/..%2fv1/items"); }
BENCHMARK(BM_Refused);

}  // namespace
}  // namespace tollgate::util

BENCHMARK_MAIN();
