// tollgate: serve | check-config.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <tollgate/config/config.hpp>
#include <tollgate/core/limit.hpp>
#include <tollgate/http/gateway.hpp>
#include <tollgate/policy/policy.hpp>

namespace {

constexpr const char* kUsage =
    "usage: tollgate serve --config FILE\n"
    "       tollgate check-config FILE\n";

std::string DescribeLimit(const tollgate::core::LimitSpec& s) {
  using tollgate::core::Algorithm;
  char buf[256];
  switch (s.algorithm) {
    case Algorithm::kTokenBucket:
      std::snprintf(buf, sizeof buf, "token_bucket capacity=%lld refill=%g/s",
                    static_cast<long long>(s.capacity),
                    static_cast<double>(s.refill.tokens) * 1e6 / static_cast<double>(s.refill.per_micros));
      break;
    case Algorithm::kQuota:
      std::snprintf(buf, sizeof buf, "quota period=%s allowance=%s ceiling=%s",
                    s.period == tollgate::core::Period::kDay ? "day" : "month",
                    s.allowance ? std::to_string(*s.allowance).c_str() : "-",
                    s.ceiling ? std::to_string(*s.ceiling).c_str() : "-");
      break;
    default:
      std::snprintf(buf, sizeof buf, "%s limit=%lld window=%gs",
                    std::string(tollgate::core::AlgorithmName(s.algorithm)).c_str(),
                    static_cast<long long>(s.limit), s.window.micros() / 1e6);
  }
  return buf;
}

int CheckConfig(const std::string& path) {
  auto config = tollgate::config::LoadConfigFile(path);
  if (!config) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), config.error().c_str());
    return 1;
  }
  const auto& c = *config;
  auto policy = tollgate::policy::Policy::Build(c);
  if (!policy) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), policy.error().c_str());
    return 1;
  }
  std::printf("%s: ok\nmode: %s\nplans:\n", path.c_str(),
              c.mode == tollgate::config::Mode::kEnforce ? "enforce" : "shadow");
  for (const auto& p : c.plans) {
    const bool enforce = p.mode.value_or(c.mode) == tollgate::config::Mode::kEnforce;
    std::printf("  %s (%s, per %s)%s\n", p.name.c_str(), enforce ? "enforce" : "shadow",
                p.scope.c_str(), &(*policy)->strictest() == &(*policy)->plans()[&p - &c.plans[0]] ? " [strictest: unknown plans get it]" : "");
    for (const auto& l : p.limits) std::printf("    %-10s %s\n", l.name.c_str(), DescribeLimit(l.spec).c_str());
  }
  if (!c.anonymous.empty()) {
    std::printf("anonymous (per client IP):\n");
    for (const auto& l : c.anonymous) std::printf("    %-10s %s\n", l.name.c_str(), DescribeLimit(l.spec).c_str());
  }
  std::printf("keys: %zu\nroutes: %zu\n", c.keys.size(), c.routes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  try {
    if (command == "check-config" && argc == 3) return CheckConfig(argv[2]);
    if (command == "serve") {
      std::string path;
      for (int i = 2; i < argc; ++i) {
        if (std::strcmp(argv[i], "--config") == 0 && i + 1 < argc) path = argv[++i];
      }
      if (path.empty()) {
        std::fputs(kUsage, stderr);
        return 2;
      }
      auto config = tollgate::config::LoadConfigFile(path);
      if (!config) {
        std::fprintf(stderr, "%s: %s\n", path.c_str(), config.error().c_str());
        return 1;
      }
      tollgate::http::Gateway gateway(path, std::move(config).value());
      return gateway.Run();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tollgate: %s\n", e.what());
    return 1;
  }
  std::fputs(kUsage, stderr);
  return 2;
}
