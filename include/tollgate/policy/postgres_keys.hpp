// API keys from PostgreSQL (issue 5): the `api_keys` table of migrations/001_api_keys.sql,
// held in memory so that no request waits on the database. Changes arrive within a second
// through LISTEN/NOTIFY; a full resync runs on a timer and after every reconnect; the last good
// key list is kept in a snapshot file to start from when PostgreSQL is down.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tollgate/config/config.hpp>
#include <tollgate/core/result.hpp>
#include <tollgate/policy/key_source.hpp>
#include <vector>

namespace tollgate::metrics {
class Registry;
}

namespace tollgate::policy {
namespace internal {
struct KeyRecord;  // one api_keys row as read, before it is checked
class Connection;  // one libpq connection, driven without blocking
class Wakeup;      // the thread's stop and wake-up signal; every wait watches it
}  // namespace internal

struct PostgresKeySourceOptions {
  // libpq connection URL ("postgres://user:pass@host:5432/db?sslmode=require") or key=value
  // string. REQUIRED. Logs and errors show it without the password.
  std::string url;
  // The configured plans; rows are checked against them. A row naming another plan is logged
  // and the key gets the strictest plan, without per-key values. REQUIRED: at least one.
  std::vector<config::PlanConfig> plans;
  // Where the last good rows are kept: written (temp file + rename, mode 0600) after the first
  // load from PostgreSQL and after every change; read by Start when PostgreSQL cannot be
  // reached. It holds key digests, never keys. Empty: no snapshot file. Default: empty.
  std::string snapshot_path;
  // Seconds between full reloads (NOTIFY brings changes sooner; this catches anything missed).
  // REQUIRES: >= 1. Default: 60.
  int resync_seconds = 60;
  // Reconnect backoff: 100 ms doubling up to this, each wait jittered to [1/2, 1] of it.
  // REQUIRES: >= 100. Default: 5000.
  int reconnect_max_ms = 5000;
  // Deadline of one connection attempt, in ms. REQUIRES: >= 1. Default: 5000.
  int connect_timeout_ms = 5000;
  // Deadline of one query; past it the connection is dropped and made again (a hung server
  // looks like a dead one). REQUIRES: >= 1. Default: 10000.
  int query_timeout_ms = 10000;
};

// The keys of `api_keys` whose status is active, as config::KeyConfig (sha256_hex, id, account,
// plan, rate_limit_per_minute, rate_limit_burst, overrides); a revoked or deleted key is left
// out, so it gets 401. A malformed row never stops the source: it is logged with its key id and
// counted in skipped_rows; the key loads with the strictest plan (unknown plan), without its
// per-key limit (rate_limit_per_minute < 1, rate_limit_burst < 0) or without its overrides
// (overrides not valid for its plan). A row without a valid key_sha256 (64 hex digits) or
// key_id cannot be looked up and is skipped whole.
//
// Thread-safe. Owns one thread, which talks to PostgreSQL and calls the callbacks; the
// destructor stops it (within a few ms: every wait also watches a stop signal).
class PostgresKeySource final : public KeySource {
 public:
  // on_change: after a NOTIFY, a resync, a reconnect or SetPlans.

  // Loads the keys from PostgreSQL, or from the snapshot file when PostgreSQL cannot be
  // reached (then keeps trying in the background). Errors: invalid options or URL; PostgreSQL
  // unreachable (or api_keys missing) and no usable snapshot file - the message says both.
  static core::Result<std::unique_ptr<PostgresKeySource>> Start(PostgresKeySourceOptions options,
                                                                ChangeCallback on_change,
                                                                LogCallback log);
  ~PostgresKeySource();
  PostgresKeySource(const PostgresKeySource&) = delete;
  PostgresKeySource& operator=(const PostgresKeySource&) = delete;

  std::vector<config::KeyConfig> Keys() const override;
  void SetPlans(std::vector<config::PlanConfig> plans) override;
  const KeySnapshotStats& stats() const override { return stats_; }
  void ExportMetrics(metrics::Registry& registry) const override;

 private:
  struct Rows;  // the rows held, by key id; the source's thread only (and Start)
  class Loop;   // the thread: reconnects, NOTIFY, the resync timer

  PostgresKeySource(PostgresKeySourceOptions options, ChangeCallback on_change, LogCallback log);
  // Start without PostgreSQL (which failed with `db_error`): the rows of the snapshot file.
  // Returns "" or Start's error.
  std::string StartFromSnapshotFile(std::string db_error);
  // Each returns false with `error` set when the connection failed (then conn_ may be null).
  bool ConnectAndListen(std::string& error);
  bool FullLoad(std::string& error);
  bool LoadIds(std::vector<std::string> key_ids, std::string& error);
  bool ReplaceAll(std::vector<internal::KeyRecord> records);  // true: something changed
  void ApplyPendingPlans();
  void Publish(bool changed);
  void WriteSnapshot();
  void Log(const std::string& line) const;

  const PostgresKeySourceOptions options_;
  const ChangeCallback on_change_;
  const LogCallback log_;
  std::string url_shown_;  // the URL without its password
  KeySnapshotStats stats_;

  mutable std::mutex mu_;
  std::vector<config::KeyConfig> keys_;                             // guarded by mu_
  std::unique_ptr<std::vector<config::PlanConfig>> pending_plans_;  // guarded by mu_

  std::unique_ptr<Rows> rows_;
  // The destructor and SetPlans wake the thread. Declared before conn_, which waits on it.
  std::unique_ptr<internal::Wakeup> wakeup_;
  std::unique_ptr<internal::Connection> conn_;
  bool notify_ = false;            // on_change is called once the thread runs
  bool snapshot_written_ = false;  // since this process started
  std::thread thread_;
};

}  // namespace tollgate::policy
