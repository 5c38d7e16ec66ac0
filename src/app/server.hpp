// `tollgate serve` (issue 32, part 2): the services built from the configuration, the gateway
// and the Envoy RLS server handed them, run until SIGTERM drains them.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <tollgate/config/config.hpp>
#include <tollgate/http/gateway.hpp>

#include "app/services.hpp"

namespace tollgate::app {

// Not thread-safe; built and run on the main thread.
class Server {
 public:
  // `config` was loaded from `config_path`, whose text is `config_text` (the version the
  // gateway reports is of these bytes). Throws std::runtime_error when the store cannot be set
  // up, a listener cannot be bound or rls.listen is set in a build without gRPC.
  Server(std::string config_path, config::Config config, std::string_view config_text);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Serves until SIGTERM or SIGINT, drains (Gateway::Run()), stops the RLS server, and returns
  // the process exit code.
  int Run();

 private:
  struct Rls;  // the Envoy RLS server of rls.listen, when the build has it (server.cpp)

  // In this order: the services outlive the gateway, which outlives the RLS server (it reads
  // the gateway's deny list and its hooks and endpoint live in the gateway).
  std::unique_ptr<Services> services_;
  http::Gateway gateway_;
  std::unique_ptr<Rls> rls_;
};

}  // namespace tollgate::app
