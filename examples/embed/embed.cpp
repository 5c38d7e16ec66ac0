// libtollgate embedded in a program: the Free plan's burst of 20, then 429s with Retry-After.
// Built and run by ctest (label unit): it exits non-zero if the limiter misbehaves.
#include <cstdio>

#include <tollgate/tollgate.hpp>

int main() {
  auto limiter = tollgate::Limiter::FromYaml(R"(
plans:
  free:
    limits:
      - {name: burst, algorithm: token_bucket, capacity: 20, refill_per_second: 0.5}
      - {name: daily, algorithm: quota, period: day, allowance: 1000, ceiling: 10000}
keys:
  - {key: demo-free-key, id: demo-free, plan: free}
)");
  if (!limiter) {
    std::fprintf(stderr, "config: %s\n", limiter.error().c_str());
    return 1;
  }
  int allowed = 0;
  tollgate::Answer last;
  for (int i = 0; i < 25; ++i) {
    last = (*limiter)->Check({.api_key = "demo-free-key", .path = "/v1/things"});
    allowed += last.allowed;
  }
  std::printf("allowed %d of 25; then %d %s\n", allowed, last.status, last.code.c_str());
  for (const auto& [name, value] : last.headers)
    std::printf("  %s: %s\n", name.c_str(), value.c_str());
  const tollgate::Answer bad = (*limiter)->Check({.api_key = "wrong", .path = "/"});
  std::printf("invalid key: %d %s\n", bad.status, bad.code.c_str());
  bool retry_after = false;
  for (const auto& [name, value] : last.headers)
    retry_after |= name == "Retry-After" && value == "2";
  return allowed == 20 && last.status == 429 && retry_after && bad.status == 401 ? 0 : 1;
}
