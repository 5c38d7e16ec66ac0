#include "listener_tls.hpp"

#include <ctime>

#include <tollgate/util/json_escape.hpp>

#include "http/tls/server_context.hpp"

namespace tollgate::http {

namespace {

int64_t NowUnix() { return static_cast<int64_t>(std::time(nullptr)); }

tls::ServerOptions OptionsOf(const config::TlsConfig& c, std::vector<std::string> alpn) {
  tls::ServerOptions o;
  o.alpn = std::move(alpn);
  for (const auto& f : c.certificates) o.certificates.push_back({f.cert_file, f.key_file});
  o.min_version = c.min_version == 13 ? TLS1_3_VERSION : TLS1_2_VERSION;
  if (!c.ciphers.empty()) o.ciphers = c.ciphers;
  o.ciphersuites = c.ciphersuites;
  o.refuse_unknown_names = c.refuse_unknown_names;
  o.session_tickets = c.session_tickets;
  using Auth = config::TlsConfig::ClientAuth;
  o.client_auth = c.client_auth == Auth::kRequired   ? tls::ClientAuth::kRequired
                  : c.client_auth == Auth::kOptional ? tls::ClientAuth::kOptional
                                                     : tls::ClientAuth::kOff;
  o.client_ca_file = c.client_ca_file;
  return o;
}

std::string ListenerLabel(const std::string& listener) {
  return metrics::Label("listener", listener);
}

}  // namespace

core::Result<std::unique_ptr<ListenerTls>> ListenerTls::Create(const config::TlsConfig& config,
                                                               std::string listener,
                                                               metrics::Registry& metrics, Log& log,
                                                               std::vector<std::string> alpn) {
  auto ctx = tls::ServerContext::Create(OptionsOf(config, std::move(alpn)), NowUnix());
  if (!ctx) return core::Error{ctx.error()};
  return std::unique_ptr<ListenerTls>(
      new ListenerTls(config, std::move(listener), metrics, log, std::move(ctx).value()));
}

ListenerTls::ListenerTls(const config::TlsConfig& config, std::string listener,
                         metrics::Registry& metrics, Log& log,
                         std::unique_ptr<tls::ServerContext> ctx)
    : handshakes_ok(metrics.Counter("tollgate_tls_handshakes_total",
                                    ListenerLabel(listener) + ",result=\"ok\"")),
      handshakes_failed(metrics.Counter("tollgate_tls_handshakes_total",
                                        ListenerLabel(listener) + ",result=\"failed\"")),
      handshakes_timeout(metrics.Counter("tollgate_tls_handshakes_total",
                                         ListenerLabel(listener) + ",result=\"timeout\"")),
      config_(config),
      listener_(std::move(listener)),
      log_(log),
      ctx_(std::move(ctx)),
      next_check_(std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(config.reload_check_ms)) {
  const std::string label = ListenerLabel(listener_);
  const tls::ServerStats& stats = ctx_->stats();
  constexpr std::string_view kReloadsHelp =
      "Reloads of a TLS listener's certificates, by listener and result (ok; error: refused, "
      "the certificates before keep serving).";
  metrics.CounterFrom("tollgate_tls_reloads_total", kReloadsHelp, metrics::ReadOf(stats.reloads_ok),
                      label + ",result=\"ok\"");
  metrics.CounterFrom("tollgate_tls_reloads_total", kReloadsHelp,
                      metrics::ReadOf(stats.reloads_error), label + ",result=\"error\"");
  metrics.CounterFrom("tollgate_tls_unknown_names_total",
                      "TLS handshakes refused for a server name (SNI) no certificate covers "
                      "(unknown_names: refuse), by listener.",
                      metrics::ReadOf(stats.unknown_names), label);
  metrics.Gauge(
      "tollgate_tls_certificate_expiry_seconds",
      "Seconds until the first of a TLS listener's served certificates expires, by listener.",
      [this] { return static_cast<double>(ctx_->FirstExpiryUnix() - NowUnix()); }, label);
}

ListenerTls::~ListenerTls() = default;

ssl_ctx_st* ListenerTls::native() const { return ctx_->native(); }

std::optional<core::Error> ListenerTls::Reload(std::string_view why) {
  auto e = ctx_->Reload(NowUnix());
  std::string line = "{\"level\":\"" + std::string(e ? "error" : "info") +
                     "\",\"msg\":\"tls certificates " + (e ? "refused" : "reloaded") +
                     "\",\"listener\":\"" + listener_ + "\",\"trigger\":\"" + std::string(why) +
                     "\"";
  if (e) line += ",\"error\":\"" + util::JsonEscape(e->message) + "\"";
  log_.Error(line + "}");
  return e;
}

void ListenerTls::Tick(std::chrono::steady_clock::time_point now) {
  if (now < next_check_) return;
  next_check_ = now + std::chrono::milliseconds(config_.reload_check_ms);
  if (ctx_->FilesChanged()) Reload("files");
}

}  // namespace tollgate::http
