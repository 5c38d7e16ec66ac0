#include "app/cli.hpp"

#include <cstdio>
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

namespace tollgate::app {

extern const char kGitRevision[];  // generated: cmake/version.cmake

std::string VersionText() {
  return std::string("tollgate ") + TOLLGATE_VERSION + " (git " + kGitRevision + ")";
}

namespace {

// tollgate replay's options (docs/operations.md, "Replay").
CLI::App* AddReplay(CLI::App& app, ReplayArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "replay",
      "Run a candidate configuration over a recorded access log (tollgate's own JSON lines) on "
      "a clock taken from the log, with the real engine and an in-memory store; report requests, "
      "would-be rejections and what changed, per plan, per route and for the top keys.");
  cmd->add_option("-c,--config", args.config, "The candidate configuration file")->required();
  cmd->add_option("--log", args.log, "The access log (JSON lines), or - for stdin")->required();
  cmd->add_option("--format", args.format, "table (default), json or csv")
      ->check(CLI::IsMember({"table", "json", "csv"}));
  cmd->add_option("--top", args.top, "How many keys to list (20)");
  cmd->add_option("--max-reject-share", args.max_reject_share,
                  "Exit 3 when the share of requests the candidate would reject is above this "
                  "(0 to 1), e.g. 0.001")
      ->check(CLI::Range(0.0, 1.0));
  return cmd;
}

}  // namespace

int RunCli(int argc, char** argv, const Commands& commands) {
  CLI::App app{"tollgate: a rate-limiting gateway and decision service for HTTP APIs.", "tollgate"};
  app.set_version_flag("-V,--version", VersionText(), "Print the version and exit");
  // At most one; none is refused after parsing, so that `tollgate launch` is named as an
  // unexpected argument rather than reported as a missing subcommand.
  app.require_subcommand(0, 1);
  app.footer(
      "Exit codes: 0 success; 1 an invalid configuration or a failure while serving (or an "
      "unreadable log); 2 a command line tollgate does not accept; 3 (replay) the would-be "
      "rejection share is above --max-reject-share.\nConfiguration reference: "
      "docs/configuration.md (installed in /usr/share/doc/tollgate).");

  std::string config, file;
  UsageArgs usage;
  CLI::App* serve = app.add_subcommand(
      "serve",
      "Run the gateway (and its decision and RLS listeners) until SIGTERM or SIGINT; "
      "SIGHUP reloads the configuration.");
  serve->add_option("-c,--config", config, "The configuration file (YAML)")->required();
  CLI::App* check = app.add_subcommand(
      "check-config",
      "Validate a configuration file (and the files it names) and print what it defines; "
      "exit 1 naming the first invalid field.");
  check->add_option("file", file, "The configuration file (YAML)")->required();
  CLI::App* export_usage =
      app.add_subcommand("usage",
                         "Print one period's metered usage, read from the running gateway's admin "
                         "listener (the one the configuration names).");
  export_usage->add_option("-c,--config", usage.config, "The configuration file")->required();
  export_usage->add_option("--period", usage.period, "A UTC day (YYYY-MM-DD) or month (YYYY-MM)")
      ->required();
  export_usage->add_option("--account", usage.account, "Only this account");
  export_usage->add_option("--format", usage.format, "csv (default) or json")
      ->check(CLI::IsMember({"csv", "json"}));

  ExplainArgs explain;
  CLI::App* explain_cmd = app.add_subcommand(
      "explain",
      "Explain what a request of a key (or an address) would meet, consuming "
      "nothing: asks the running gateway's admin listener (GET /admin/explain).");
  explain_cmd->add_option("-c,--config", explain.config, "The configuration file")->required();
  auto* by_key = explain_cmd->add_option("--key-id", explain.key_id, "The key's id");
  explain_cmd->add_option("--address", explain.address, "A client address (anonymous routes)")
      ->excludes(by_key);
  explain_cmd->add_option("--method", explain.method, "The request's method (GET)");
  explain_cmd->add_option("--path", explain.path, "The request's path and query (/)");
  explain_cmd->add_option("--host", explain.host,
                          "The request's Host, for routes with `host:` (none)");

  ReplayArgs replay;
  CLI::App* replay_cmd = AddReplay(app, replay);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help and version go to stdout and exit 0; every other parse error is a usage error.
    const int code = app.exit(e, std::cout, std::cerr);
    return code == 0 ? kExitOk : kExitUsage;
  }
  if (app.get_subcommands().empty()) {
    std::cerr << "A subcommand is required (serve, check-config, usage, explain or replay)\n"
                 "Run with --help for more information.\n";
    return kExitUsage;
  }
  try {
    if (serve->parsed()) return commands.serve(config);
    if (check->parsed()) return commands.check_config(file);
    if (explain_cmd->parsed()) return commands.explain(explain);
    if (replay_cmd->parsed()) return commands.replay(replay);
    return commands.usage(usage);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tollgate: %s\n", e.what());
    return kExitError;
  }
}

}  // namespace tollgate::app
