// The command line: subcommands, --help and --version, and the exit codes (CLI11).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

namespace tollgate::app {

// The exit codes, documented in --help and docs/operations.md.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;  // the configuration is invalid, or serving failed
inline constexpr int kExitUsage = 2;  // the command line is not one tollgate accepts
// tollgate replay: the candidate's would-be rejection share is above --max-reject-share.
inline constexpr int kExitRejectShare = 3;

struct UsageArgs {
  std::string config, period, account, format = "csv";
};

struct ExplainArgs {
  std::string config, key_id, address, method = "GET", path = "/", host;
};

struct ReplayArgs {
  std::string config, log, format = "table";
  size_t top = 20;
  std::optional<double> max_reject_share;
};

// What each subcommand runs; each returns its exit code and may throw std::exception (exit 1).
struct Commands {
  std::function<int(const std::string& config)> serve;
  std::function<int(const std::string& file)> check_config;
  std::function<int(const UsageArgs& args)> usage;
  std::function<int(const ExplainArgs& args)> explain;
  std::function<int(const ReplayArgs& args)> replay;
};

// "tollgate 0.1.0 (git v0.1.0-12-gabcdef123456)".
std::string VersionText();

// Parses the command line and runs the subcommand: --help (-h, also after a subcommand) and
// --version print to stdout and exit 0; an unknown flag, a missing value or subcommand prints
// why to stderr and exits 2.
int RunCli(int argc, char** argv, const Commands& commands);

}  // namespace tollgate::app
