// A TLS listener's upkeep (issue 33): its OpenSSL context, its certificates reloaded on demand
// and when their files change, each reload counted and logged, the handshakes counted, and the
// served certificates' expiry as a gauge. OpenSSL stays in listener_tls.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <tollgate/config/config.hpp>
#include <tollgate/core/result.hpp>
#include <tollgate/metrics/metrics.hpp>

#include "access_log.hpp"

struct ssl_ctx_st;

namespace tollgate::http {

namespace tls {
class ServerContext;
}

// Thread-safe: handshakes on the workers, Reload() and Tick() on the main thread.
class ListenerTls {
 public:
  // The context of `config`, for the listener named `listener` ("gateway", "admin"). Errors
  // name the file and the reason. `alpn`: the protocols ALPN offers, in order of preference.
  static core::Result<std::unique_ptr<ListenerTls>> Create(
      const config::TlsConfig& config, std::string listener, metrics::Registry& metrics, Log& log,
      std::vector<std::string> alpn = {"http/1.1"});
  ~ListenerTls();
  ListenerTls(const ListenerTls&) = delete;
  ListenerTls& operator=(const ListenerTls&) = delete;

  ssl_ctx_st* native() const;
  std::chrono::milliseconds handshake_timeout() const {
    return std::chrono::milliseconds(config_.handshake_timeout_ms);
  }

  // Reads the certificates again (`why`: "signal", "admin", "files"): new handshakes get them,
  // open connections keep theirs. A set that cannot be loaded is refused, logged and counted,
  // and the one before keeps serving.
  std::optional<core::Error> Reload(std::string_view why);
  // On the main thread's tick: Reload("files") when a file changed, checked every
  // reload_check_ms.
  void Tick(std::chrono::steady_clock::time_point now);

  std::atomic<uint64_t>& handshakes_ok;
  std::atomic<uint64_t>& handshakes_failed;
  std::atomic<uint64_t>& handshakes_timeout;

 private:
  ListenerTls(const config::TlsConfig& config, std::string listener, metrics::Registry& metrics,
              Log& log, std::unique_ptr<tls::ServerContext> ctx);
  const config::TlsConfig config_;
  const std::string listener_;
  Log& log_;
  std::unique_ptr<tls::ServerContext> ctx_;
  std::chrono::steady_clock::time_point next_check_{};
};

}  // namespace tollgate::http
