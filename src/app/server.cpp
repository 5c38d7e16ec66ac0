#include "app/server.hpp"

#include <stdexcept>
#include <utility>

#ifdef TOLLGATE_HAVE_RLS
#include <tollgate/rls/rls_server.hpp>
#endif

namespace tollgate::app {

#ifdef TOLLGATE_HAVE_RLS
struct Server::Rls {
  std::unique_ptr<rls::RlsServer> server;
};

namespace {

// Envoy's rate limit service (rls.listen) on the services' engine and policy, or nothing.
std::unique_ptr<rls::RlsServer> StartRls(const config::Config& config, Services& services,
                                         http::Gateway& gateway) {
  const config::RlsConfig& rls = config.rls;
  if (rls.listen.empty()) return nullptr;
  rls::RlsOptions options{.listen = rls.listen,
                          .envoy_config = rls.envoy_config,
                          .shadow_mode = rls.shadow_mode,
                          .response_headers = rls.response_headers,
                          .near_limit_ratio = rls.near_limit_ratio,
                          .store_spans_scopes = !config::IsRedisCluster(config.store),
                          .registry = &services.metrics(),
                          .headers = config.headers,
                          .runtime_deny = [&gateway] { return gateway.RuntimeDeny(); }};
  for (const auto& d : rls.domains) options.domains.push_back({d.domain, d.key_entry, d.ip_entry});
  auto server =
      std::make_unique<rls::RlsServer>(std::move(options), services.engine(),
                                       [&policy = services.policy()] { return policy.Current(); });
  auto port = server->Start();
  if (!port) throw std::runtime_error(port.error());
  server->ExportMetrics(services.metrics());
  gateway.OnDrain([s = server.get()] { s->SetServing(false); });
  gateway.OnReload([s = server.get()] { (void)s->Reload(); });
  gateway.AddAdminEndpoint("/json", [s = server.get()](std::string body, auto reply) {
    s->DecideJson(std::move(body), std::move(reply));
  });
  return server;
}

}  // namespace
#else
struct Server::Rls {};
#endif

Server::Server(std::string config_path, config::Config config, std::string_view config_text)
    : services_(Services::Open(config)),
      gateway_(std::move(config_path), config, config_text, services_->ForGateway()) {
  services_->ExportMetrics(services_->metrics());
#ifdef TOLLGATE_HAVE_RLS
  rls_ = std::make_unique<Rls>(Rls{StartRls(config, *services_, gateway_)});
#else
  if (!config.rls.listen.empty()) {
    throw std::runtime_error("rls.listen: this build has no gRPC (configure with TOLLGATE_RLS=ON)");
  }
#endif
}

Server::~Server() = default;

int Server::Run() {
  const int code = gateway_.Run();
  rls_.reset();  // before the gateway, whose hooks and admin endpoint it set
  return code;
}

}  // namespace tollgate::app
