// The live page's data (GET /admin/ui/data, admin_ui.cpp; issue 23): what it shows besides
// counters, kept by the gateway. No HTTP library.
#pragma once

#include <chrono>
#include <mutex>
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
  void ReadConfig(const std::string& path);  // SetConfig of the file at `path` now (at start)
  std::string Version() const;
  std::string LoadedAt() const;
  std::chrono::steady_clock::time_point started() const { return started_; }

 private:
  mutable std::mutex mu_;
  std::string version_, loaded_at_;  // under mu_
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

// GET /admin/ui/data: everything the page shows, one JSON object (docs/operations.md, "Live
// page"). Answers through `reply`, maybe on another thread.
void UiData(Gateway::Impl& g, std::string query, Gateway::AdminReply reply);

}  // namespace tollgate::http
