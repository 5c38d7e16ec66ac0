// tollgate: serve | check-config | usage | explain | replay (the command line: app/cli.cpp).
#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include <tollgate/config/config.hpp>
#include <tollgate/config/envoy_rls.hpp>
#include <tollgate/core/limit.hpp>
#include <tollgate/policy/policy.hpp>
#include <tollgate/replay/replay.hpp>
#include <tollgate/util/host_port.hpp>

#include "app/cli.hpp"
#include "app/server.hpp"

namespace {

// GET http://host:port/path with a plain socket; returns the status and the body.
std::pair<int, std::string> HttpGet(const std::string& host_port, const std::string& path) {
  const auto hp = tollgate::util::SplitHostPort(host_port);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (!hp || getaddrinfo(hp->host.c_str(), hp->port.c_str(), &hints, &res) != 0 || !res) {
    throw std::runtime_error("cannot resolve " + host_port);
  }
  const int fd = socket(res->ai_family, SOCK_STREAM, 0);
  const int rc = connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (fd < 0 || rc != 0) {
    if (fd >= 0) close(fd);
    throw std::runtime_error("cannot connect to the admin listener at " + host_port +
                             " (is tollgate serve running with this config?)");
  }
  // A gateway that accepts but never answers must not hang the CLI (a billing cron job).
  const timeval timeout{.tv_sec = 60, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: " + host_port + "\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[8192];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  // Closed or timed out before the whole response: an error, never "0" or a truncated export.
  const size_t body = out.find("\r\n\r\n");
  if (out.rfind("HTTP/1.", 0) != 0 || out.size() < 12 || body == std::string::npos) {
    throw std::runtime_error("no complete HTTP response from the admin listener at " + host_port);
  }
  std::string head = out.substr(0, body + 2);
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (const size_t cl = head.find("\r\ncontent-length:");
      cl != std::string::npos &&
      std::strtoull(head.c_str() + cl + 17, nullptr, 10) != out.size() - body - 4) {
    throw std::runtime_error("incomplete HTTP response from the admin listener at " + host_port);
  }
  return {std::atoi(out.c_str() + 9), out.substr(body + 4)};
}

// A query-string value, percent-encoded.
std::string Escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// tollgate usage: the usage of a period, from the running gateway's admin listener (which reads
// Redis when the store is Redis, so the counts outlive gateway restarts).
int Usage(const tollgate::app::UsageArgs& args) {
  const std::string& config_path = args.config;
  const std::string& period = args.period;
  const std::string& account = args.account;
  const std::string& format = args.format;
  auto config = tollgate::config::LoadConfigFile(config_path);
  if (!config) {
    std::fprintf(stderr, "%s: %s\n", config_path.c_str(), config.error().c_str());
    return tollgate::app::kExitError;
  }
  const auto [status, body] =
      HttpGet(config->server.admin_listen, "/admin/usage?period=" + Escape(period) +
                                               "&account=" + Escape(account) + "&format=" + format);
  if (status != 200) {
    std::fprintf(stderr, "tollgate usage: %d %s\n", status, body.c_str());
    return tollgate::app::kExitError;
  }
  std::fwrite(body.data(), 1, body.size(), stdout);
  return 0;
}

// tollgate explain: GET /admin/explain of the running gateway named by the configuration.
int Explain(const tollgate::app::ExplainArgs& args) {
  auto config = tollgate::config::LoadConfigFile(args.config);
  if (!config) {
    std::fprintf(stderr, "%s: %s\n", args.config.c_str(), config.error().c_str());
    return tollgate::app::kExitError;
  }
  if (args.key_id.empty() == args.address.empty()) {
    std::fputs("tollgate explain: give --key-id or --address\n", stderr);
    return tollgate::app::kExitUsage;
  }
  const std::string who =
      args.key_id.empty() ? "address=" + Escape(args.address) : "key_id=" + Escape(args.key_id);
  const auto [status, body] = HttpGet(config->server.admin_listen,
                                      "/admin/explain?" + who + "&method=" + Escape(args.method) +
                                          "&path=" + Escape(args.path) +
                                          (args.host.empty() ? "" : "&host=" + Escape(args.host)));
  std::fwrite(body.data(), 1, body.size(), status == 200 ? stdout : stderr);
  std::fputc('\n', status == 200 ? stdout : stderr);
  return status == 200 ? tollgate::app::kExitOk : tollgate::app::kExitError;
}

// tollgate replay: the candidate configuration over a recorded access log (src/replay/).
int Replay(const tollgate::app::ReplayArgs& args) {
  auto config = tollgate::config::LoadConfigFile(args.config);
  if (!config) {
    std::fprintf(stderr, "%s: %s\n", args.config.c_str(), config.error().c_str());
    return tollgate::app::kExitError;
  }
  auto policy = tollgate::policy::Policy::Build(*std::move(config));
  if (!policy) {
    std::fprintf(stderr, "%s: %s\n", args.config.c_str(), policy.error().c_str());
    return tollgate::app::kExitError;
  }
  const int fd = args.log == "-" ? STDIN_FILENO : open(args.log.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::fprintf(stderr, "%s: %s\n", args.log.c_str(), std::strerror(errno));
    return tollgate::app::kExitError;
  }
  tollgate::replay::Replayer replayer(*policy, {.top_keys = args.top});
  std::string error;
  const bool read = replayer.FeedFile(fd, error);
  if (fd != STDIN_FILENO) close(fd);
  if (!read) {
    std::fprintf(stderr, "%s: %s\n", args.log.c_str(), error.c_str());
    return tollgate::app::kExitError;
  }
  const tollgate::replay::Report report = replayer.Finish();
  using tollgate::replay::Format;
  const Format format = args.format == "json"  ? Format::kJson
                        : args.format == "csv" ? Format::kCsv
                                               : Format::kTable;
  const std::string out = tollgate::replay::Render(report, format, args.max_reject_share);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (report.lines == 0)
    std::fprintf(stderr, "tollgate replay: %s: the log is empty\n", args.log.c_str());
  if (report.malformed > 0) {
    std::fprintf(stderr, "tollgate replay: %llu malformed line(s), the first at line %llu\n",
                 static_cast<unsigned long long>(report.malformed),
                 static_cast<unsigned long long>(report.first_malformed.at(0).line));
  }
  if (args.max_reject_share && ExceedsShare(report, *args.max_reject_share)) {
    return tollgate::app::kExitRejectShare;
  }
  return tollgate::app::kExitOk;
}

std::string DescribeLimit(const tollgate::core::LimitSpec& s) {
  using tollgate::core::Algorithm;
  char buf[256];
  switch (s.algorithm) {
    case Algorithm::kTokenBucket:
      std::snprintf(
          buf, sizeof buf, "token_bucket capacity=%lld refill=%g/s",
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
    return tollgate::app::kExitError;
  }
  const auto& c = *config;
  auto policy = tollgate::policy::Policy::Build(c);
  if (!policy) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), policy.error().c_str());
    return tollgate::app::kExitError;
  }
  std::printf("%s: ok\nmode: %s\nplans:\n", path.c_str(),
              c.mode == tollgate::config::Mode::kEnforce ? "enforce" : "shadow");
  for (const auto& p : c.plans) {
    const bool enforce = p.mode.value_or(c.mode) == tollgate::config::Mode::kEnforce;
    const tollgate::policy::Plan& compiled = (*policy)->plans()[&p - &c.plans[0]];
    std::printf("  %s (%s, per %s, sustained %g/s)%s\n", p.name.c_str(),
                enforce ? "enforce" : "shadow", p.scope.c_str(),
                tollgate::policy::SustainedPerSecond(compiled),
                &(*policy)->strictest() == &compiled
                    ? " [strictest: keys of an unknown plan get it: the lowest sustained rate of "
                      "the enforced plans]"
                    : "");
    for (const auto& l : p.limits)
      std::printf("    %-10s %s\n", l.name.c_str(), DescribeLimit(l.spec).c_str());
  }
  if (!c.anonymous.empty()) {
    std::printf("anonymous (per client IP):\n");
    for (const auto& l : c.anonymous)
      std::printf("    %-10s %s\n", l.name.c_str(), DescribeLimit(l.spec).c_str());
  }
  if (!c.rls.envoy_config.empty()) {
    auto envoy = tollgate::config::LoadEnvoyRlsConfig(c.rls.envoy_config);
    if (!envoy) {
      std::fprintf(stderr, "%s: rls.envoy_config: %s\n", path.c_str(), envoy.error().c_str());
      return tollgate::app::kExitError;
    }
    std::printf("rls.envoy_config: %zu domain(s) from %zu file(s)\n", envoy->domains.size(),
                envoy->files.size());
  }
  std::printf("keys: %zu\nroutes: %zu\n", c.keys.size(), c.routes.size());
  for (const std::string& w : tollgate::config::UnreachableRoutes(c.routes)) {
    std::printf("warning: %s\n", w.c_str());
  }
  for (const std::string& w : tollgate::config::UnknownPlanWarnings(c)) {
    std::printf("warning: %s\n", w.c_str());
  }
  return 0;
}

int Serve(const std::string& path) {
  std::string text;  // the version the gateway reports is of these bytes, the ones it serves
  auto config = tollgate::config::LoadConfigFile(path, &text);
  if (!config) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), config.error().c_str());
    return tollgate::app::kExitError;
  }
  return tollgate::app::Server(path, *std::move(config), text).Run();
}

}  // namespace

int main(int argc, char** argv) {
  return tollgate::app::RunCli(argc, argv,
                               {.serve = Serve,
                                .check_config = CheckConfig,
                                .usage = Usage,
                                .explain = Explain,
                                .replay = Replay});
}
