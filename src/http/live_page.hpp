// The live page's data (GET /admin/ui/data, admin_ui.cpp; issue 23): what it shows besides
// counters, kept by the gateway. No HTTP library.
#pragma once

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <tollgate/http/gateway.hpp>

namespace tollgate::http {

// The configuration's version and when the process started. Thread-safe.
class LivePage {
 public:
  // The file as loaded (at start, or by a reload that was accepted): the version becomes the
  // first 12 hex digits of its SHA-256, `loaded_at` now (UTC, ISO 8601).
  void SetConfig(std::string_view file_text);
  std::string Version() const;
  std::string LoadedAt() const;
  std::chrono::steady_clock::time_point started() const { return started_; }
  // GET /admin/ui/data's usage section (JSON), kept for kUsageSeconds: reading it costs the
  // usage store a flush and a read per account and day, however many pages are open.
  static constexpr int64_t kUsageSeconds = 10;
  std::optional<std::string> CachedUsage(int64_t now_s) const {
    std::lock_guard lock(mu_);
    if (usage_json_.empty() || now_s - usage_read_s_ >= kUsageSeconds) return std::nullopt;
    return usage_json_;
  }
  void CacheUsage(std::string usage_json, int64_t now_s) {
    std::lock_guard lock(mu_);
    usage_json_ = std::move(usage_json);
    usage_read_s_ = now_s;
  }

 private:
  mutable std::mutex mu_;
  std::string version_, loaded_at_;  // under mu_
  std::string usage_json_;           // under mu_
  int64_t usage_read_s_ = 0;         // under mu_
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

// Why a request to the admin listener is refused as a browser's from elsewhere, or "" when it is
// not (docs/operations.md, "Live page"): one another site's page sent (`Sec-Fetch-Site:
// cross-site` or `same-site`, or an `Origin` other than its own `Host`): CSRF. Requests without
// these headers (curl, scripts, Prometheus) pass. DNS rebinding (a page reading the listener
// through a name it points at 127.0.0.1) is AdminGuard's: every admin request's Host is checked.
std::string_view AdminBrowserRefusal(std::string_view host, std::string_view origin,
                                     std::string_view fetch_site);

// GET /admin/ui/data: everything the page shows, one JSON object (docs/operations.md, "Live
// page"). Answers through `reply`, maybe on another thread.
void UiData(Gateway::Impl& g, std::string query, Gateway::AdminReply reply);

}  // namespace tollgate::http
