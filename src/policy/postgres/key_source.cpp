// PostgresKeySource: the rows held, their checks and logs, and the thread that keeps them in
// step with PostgreSQL (reconnects, NOTIFY, the resync timer). The rows' checks are
// key_record.hpp's, the file snapshot_file.hpp's, the libpq side connection.hpp's.
#include <algorithm>
#include <boost/json/serialize.hpp>
#include <cstdio>
#include <ctime>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <tollgate/metrics/metrics.hpp>
#include <tollgate/policy/postgres_keys.hpp>

#include "policy/postgres/connection.hpp"
#include "policy/postgres/key_record.hpp"
#include "policy/postgres/snapshot_file.hpp"

namespace json = boost::json;

namespace tollgate::policy {
namespace {

using internal::KeyRecord;
using internal::SteadyClock;
using internal::Wait;

constexpr int kFirstBackoffMs = 100;
constexpr auto kFailureLogInterval = std::chrono::seconds(30);

std::string JsonLine(std::string_view level, std::string_view msg,
                     const json::object& fields = {}) {
  json::object o;
  o["level"] = level;
  o["msg"] = msg;
  o["source"] = "postgres_keys";
  for (const auto& kv : fields) o[kv.key()] = kv.value();
  return json::serialize(o);
}

// The options' error without the "postgres key source: " prefix, or "".
std::string CheckOptions(const PostgresKeySourceOptions& options) {
  if (options.url.empty()) return "url: required";
  if (options.plans.empty()) return "plans: at least one plan is required";
  if (options.resync_seconds < 1) return "resync_seconds: must be >= 1";
  if (options.reconnect_max_ms < kFirstBackoffMs) {
    return "reconnect_max_ms: must be >= " + std::to_string(kFirstBackoffMs);
  }
  if (options.connect_timeout_ms < 1) return "connect_timeout_ms: must be >= 1";
  if (options.query_timeout_ms < 1) return "query_timeout_ms: must be >= 1";
  return "";
}

}  // namespace

struct PostgresKeySource::Rows {
  struct Entry {
    KeyRecord record;
    std::optional<config::KeyConfig> key;  // nullopt: the row cannot be used
  };
  std::vector<config::PlanConfig> plans;
  std::map<std::string, Entry> by_id;

  // Checks `r`, logging and counting what is wrong with it.
  Entry Check(const KeyRecord& r, const PostgresKeySource& source, KeySnapshotStats& stats) const {
    std::vector<internal::RowProblem> problems;
    Entry e{r, internal::CheckRow(r, plans, problems)};
    if (!problems.empty()) stats.skipped_rows.fetch_add(1, std::memory_order_relaxed);
    for (const internal::RowProblem& p : problems) {
      source.Log(JsonLine("error", "malformed api_keys row",
                          {{"key_id", r.key_id}, {"error", p.error}, {"action", p.action}}));
    }
    return e;
  }
};

// The source's thread: reconnects with a jittered backoff, reads NOTIFY, resyncs on the timer.
// The backoff and the log interval start again only after a good full load, so a server that
// accepts connections and then fails every query is not hammered, nor logged non-stop.
// Not thread-safe: the source's thread only.
class PostgresKeySource::Loop {
 public:
  explicit Loop(PostgresKeySource& source);
  void Run();  // until the source stops

 private:
  bool stopping() const { return s_.wakeup_->stopping(); }
  std::chrono::milliseconds Jittered(int ms) {
    return std::chrono::milliseconds(std::uniform_int_distribution<int>(ms / 2, ms)(rng_));
  }
  void Reconnect();  // not connected: waits out the backoff, then one attempt
  void Connected(SteadyClock::time_point now);
  void Serve();  // connected: notifications, the resync timer, the socket
  void Failed(const std::string& error, SteadyClock::time_point now);  // an attempt failed
  void Drop(const std::string& why);  // the connection failed: closes it
  void BackOff(SteadyClock::time_point now);
  // Whether a failure now is logged: the first, then one per kFailureLogInterval.
  bool LogDue(SteadyClock::time_point now);

  PostgresKeySource& s_;
  std::minstd_rand rng_;
  const std::chrono::seconds resync_;
  int backoff_ms_ = kFirstBackoffMs;
  bool had_connection_;
  SteadyClock::time_point retry_at_;
  SteadyClock::time_point next_resync_;
  std::optional<SteadyClock::time_point> last_failure_log_;  // unset: the next failure is logged
  uint64_t failed_attempts_ = 0;
};

PostgresKeySource::Loop::Loop(PostgresKeySource& source)
    : s_(source),
      rng_(std::random_device{}()),
      resync_(source.options_.resync_seconds),
      had_connection_(source.conn_ != nullptr) {
  retry_at_ = SteadyClock::now() + Jittered(backoff_ms_);
  next_resync_ = SteadyClock::now() + resync_;
}

void PostgresKeySource::Loop::Run() {
  while (!stopping()) {
    try {
      s_.ApplyPendingPlans();
      if (s_.conn_) {
        Serve();
      } else {
        Reconnect();
      }
    } catch (const std::exception& e) {
      // Nothing here throws by design; if something does, the keys held keep serving.
      s_.stats_.errors.fetch_add(1, std::memory_order_relaxed);
      s_.Log(JsonLine("error", "postgres key source failed; reconnecting", {{"error", e.what()}}));
      s_.conn_.reset();
      s_.stats_.connected = false;
      retry_at_ = SteadyClock::now() + std::chrono::milliseconds(s_.options_.reconnect_max_ms);
    }
  }
  s_.conn_.reset();
  s_.stats_.connected = false;
}

void PostgresKeySource::Loop::Reconnect() {
  if (SteadyClock::now() < retry_at_) {
    s_.wakeup_->WaitFor(-1, false, retry_at_, true);
    return;
  }
  std::string error;
  s_.ConnectAndListen(error);
  if (stopping()) return;
  const auto now = SteadyClock::now();
  if (!s_.conn_) {
    Failed(error, now);
    return;
  }
  Connected(now);
  if (!s_.FullLoad(error)) {
    if (!stopping()) Drop(error);
    return;
  }
  backoff_ms_ = kFirstBackoffMs;
  last_failure_log_.reset();
}

// Connected and listening (so nothing committed from now on is missed): the stats say so
// before the resync publishes its keys.
void PostgresKeySource::Loop::Connected(SteadyClock::time_point now) {
  s_.stats_.connected = true;
  if (had_connection_) s_.stats_.reconnects.fetch_add(1, std::memory_order_relaxed);
  had_connection_ = true;
  s_.Log(JsonLine("info", "PostgreSQL connected; resyncing api keys",
                  {{"url", s_.url_shown_}, {"failed_attempts", failed_attempts_}}));
  failed_attempts_ = 0;
  next_resync_ = now + resync_;
}

void PostgresKeySource::Loop::Serve() {
  std::vector<std::string> ids;
  std::string error;
  const size_t notified = s_.conn_->TakeNotifications(ids);
  s_.stats_.notifications.fetch_add(notified, std::memory_order_relaxed);
  if (!ids.empty()) {
    if (!s_.LoadIds(std::move(ids), error) && !stopping()) Drop(error);
    return;
  }
  if (SteadyClock::now() >= next_resync_) {
    if (!s_.FullLoad(error) && !stopping()) Drop(error);
    next_resync_ = SteadyClock::now() + resync_;
    return;
  }
  if (s_.conn_->IsBad()) {
    Drop("the connection is closed");
  } else if (s_.wakeup_->WaitFor(s_.conn_->socket(), false, next_resync_, true) == Wait::kReady &&
             !s_.conn_->ConsumeInput(error)) {
    Drop(error);
  }
}

void PostgresKeySource::Loop::Failed(const std::string& error, SteadyClock::time_point now) {
  // Counted every time, logged at a bounded rate (the first, then every 30 s).
  s_.stats_.errors.fetch_add(1, std::memory_order_relaxed);
  ++failed_attempts_;
  if (LogDue(now)) {
    s_.Log(JsonLine("error", "cannot reach PostgreSQL; serving the keys held",
                    {{"url", s_.url_shown_}, {"error", error}, {"attempts", failed_attempts_}}));
  }
  BackOff(now);
}

void PostgresKeySource::Loop::Drop(const std::string& why) {
  s_.conn_.reset();
  s_.stats_.connected = false;
  s_.stats_.errors.fetch_add(1, std::memory_order_relaxed);
  const auto now = SteadyClock::now();
  if (LogDue(now)) {
    s_.Log(JsonLine("error", "lost PostgreSQL; serving the keys held",
                    {{"url", s_.url_shown_}, {"error", why}}));
  }
  BackOff(now);
}

void PostgresKeySource::Loop::BackOff(SteadyClock::time_point now) {
  retry_at_ = now + Jittered(backoff_ms_);
  backoff_ms_ = std::min(backoff_ms_ * 2, s_.options_.reconnect_max_ms);
}

bool PostgresKeySource::Loop::LogDue(SteadyClock::time_point now) {
  if (last_failure_log_ && now - *last_failure_log_ < kFailureLogInterval) return false;
  last_failure_log_ = now;
  return true;
}

PostgresKeySource::PostgresKeySource(PostgresKeySourceOptions options, ChangeCallback on_change,
                                     LogCallback log)
    : options_(std::move(options)),
      on_change_(std::move(on_change)),
      log_(std::move(log)),
      rows_(std::make_unique<Rows>()) {
  rows_->plans = options_.plans;
}

core::Result<std::unique_ptr<PostgresKeySource>> PostgresKeySource::Start(
    PostgresKeySourceOptions options, ChangeCallback on_change, LogCallback log) {
  const std::string what = "postgres key source: ";
  if (const std::string error = CheckOptions(options); !error.empty()) {
    return core::Error{what + error};
  }
  auto shown = internal::UrlShown(options.url);
  if (!shown) return core::Error{what + "url: " + shown.error()};

  std::unique_ptr<PostgresKeySource> s(
      new PostgresKeySource(std::move(options), std::move(on_change), std::move(log)));
  s->url_shown_ = *shown;
  auto wakeup = internal::Wakeup::Create();
  if (!wakeup) return core::Error{what + "eventfd: " + wakeup.error()};
  s->wakeup_ = std::move(wakeup).value();

  std::string db_error;
  if (!s->ConnectAndListen(db_error) || !s->FullLoad(db_error)) s->conn_.reset();
  if (s->conn_) {
    s->stats_.connected = true;
    s->Log(JsonLine("info", "api keys loaded from PostgreSQL",
                    {{"url", s->url_shown_}, {"keys", s->Keys().size()}}));
  } else if (const std::string error = s->StartFromSnapshotFile(db_error); !error.empty()) {
    return core::Error{error};
  }
  s->notify_ = true;
  s->thread_ = std::thread([p = s.get()] { Loop(*p).Run(); });
  return s;
}

std::string PostgresKeySource::StartFromSnapshotFile(std::string db_error) {
  stats_.errors.fetch_add(1, std::memory_order_relaxed);
  if (db_error.find("\"api_keys\" does not exist") != std::string::npos) {
    db_error += "; apply migrations/001_api_keys.sql";
  }
  auto records = internal::ReadSnapshotFile(options_.snapshot_path);
  if (!records) {
    return "cannot load API keys: PostgreSQL at " + url_shown_ + " failed (" + db_error +
           "), and " + records.error();
  }
  ReplaceAll(std::move(records).value());
  Publish(true);
  stats_.using_snapshot_file = true;
  Log(JsonLine("warn", "PostgreSQL unreachable at start; serving the keys of the snapshot file",
               {{"url", url_shown_},
                {"error", db_error},
                {"snapshot_path", options_.snapshot_path},
                {"keys", Keys().size()}}));
  return "";
}

PostgresKeySource::~PostgresKeySource() {
  if (wakeup_) wakeup_->Stop();
  if (thread_.joinable()) thread_.join();
  conn_.reset();
}

std::vector<config::KeyConfig> PostgresKeySource::Keys() const {
  std::lock_guard lock(mu_);
  return keys_;
}

void PostgresKeySource::SetPlans(std::vector<config::PlanConfig> plans) {
  {
    std::lock_guard lock(mu_);
    pending_plans_ = std::make_unique<std::vector<config::PlanConfig>>(std::move(plans));
  }
  wakeup_->Wake();
}

void PostgresKeySource::Log(const std::string& line) const {
  if (log_) {
    log_(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

bool PostgresKeySource::ConnectAndListen(std::string& error) {
  auto c = internal::Connection::Open(
      options_.url, options_.connect_timeout_ms, options_.query_timeout_ms, *wakeup_,
      [this](const std::string& notice) {
        Log(JsonLine("warn", "postgres notice", {{"notice", notice}}));
      });
  if (!c) {
    error = c.error();
    return false;
  }
  conn_ = std::move(c).value();
  if (!conn_->Listen(error)) {
    conn_.reset();
    return false;
  }
  return true;
}

bool PostgresKeySource::FullLoad(std::string& error) {
  auto records = conn_->SelectActive();
  if (!records) {
    error = records.error();
    return false;
  }
  const bool changed = ReplaceAll(std::move(records).value());
  stats_.loads.fetch_add(1, std::memory_order_relaxed);
  stats_.using_snapshot_file = false;
  Publish(changed);
  if (changed || !snapshot_written_) WriteSnapshot();
  return true;
}

bool PostgresKeySource::LoadIds(std::vector<std::string> key_ids, std::string& error) {
  std::sort(key_ids.begin(), key_ids.end());
  key_ids.erase(std::unique(key_ids.begin(), key_ids.end()), key_ids.end());
  if (std::binary_search(key_ids.begin(), key_ids.end(), "*")) return FullLoad(error);
  auto records = conn_->SelectActiveByIds(key_ids);
  if (!records) {
    error = records.error();
    return false;
  }
  std::map<std::string, KeyRecord> found;
  for (KeyRecord& rec : *records) found.emplace(rec.key_id, std::move(rec));
  bool changed = false;
  for (const std::string& id : key_ids) {
    const auto f = found.find(id);
    const auto held = rows_->by_id.find(id);
    if (f == found.end()) {  // revoked or deleted
      if (held != rows_->by_id.end()) {
        rows_->by_id.erase(held);
        changed = true;
      }
    } else if (held == rows_->by_id.end() || !(held->second.record == f->second)) {
      rows_->by_id.insert_or_assign(id, rows_->Check(f->second, *this, stats_));
      changed = true;
    }
  }
  Publish(changed);
  if (changed || !snapshot_written_) WriteSnapshot();
  return true;
}

bool PostgresKeySource::ReplaceAll(std::vector<KeyRecord> records) {
  std::map<std::string, Rows::Entry> next;
  bool changed = false;
  for (KeyRecord& rec : records) {
    if (next.count(rec.key_id)) {  // only a hand-edited snapshot file can do this
      stats_.skipped_rows.fetch_add(1, std::memory_order_relaxed);
      Log(JsonLine(
          "error", "malformed api_keys row",
          {{"key_id", rec.key_id}, {"error", "key_id: duplicate"}, {"action", "row skipped"}}));
      continue;
    }
    const auto held = rows_->by_id.find(rec.key_id);
    if (held != rows_->by_id.end() && held->second.record == rec) {
      next.emplace(rec.key_id, std::move(held->second));  // unchanged: checked (and logged) before
    } else {
      changed = true;
      next.emplace(rec.key_id, rows_->Check(rec, *this, stats_));
    }
  }
  changed = changed || next.size() != rows_->by_id.size();
  rows_->by_id = std::move(next);
  return changed;
}

void PostgresKeySource::ApplyPendingPlans() {
  std::unique_ptr<std::vector<config::PlanConfig>> plans;
  {
    std::lock_guard lock(mu_);
    plans = std::move(pending_plans_);
  }
  if (!plans) return;
  rows_->plans = std::move(*plans);
  for (auto& [id, entry] : rows_->by_id) entry = rows_->Check(entry.record, *this, stats_);
  Publish(true);
}

void PostgresKeySource::Publish(bool changed) {
  if (!changed) return;
  std::vector<config::KeyConfig> keys;
  keys.reserve(rows_->by_id.size());
  std::set<std::string_view> digests;
  for (const auto& [id, entry] : rows_->by_id) {
    if (!entry.key) continue;
    if (!digests.insert(entry.key->sha256_hex).second) {
      // The table's primary key forbids this; only a hand-edited snapshot file can do it.
      Log(JsonLine(
          "error", "malformed api_keys row",
          {{"key_id", id}, {"error", "key_sha256: duplicate"}, {"action", "row skipped"}}));
      continue;
    }
    keys.push_back(*entry.key);
  }
  {
    std::lock_guard lock(mu_);
    keys_ = keys;
  }
  if (notify_ && on_change_) on_change_(std::move(keys));
}

void PostgresKeySource::WriteSnapshot() {
  if (options_.snapshot_path.empty()) return;
  std::vector<KeyRecord> records;
  records.reserve(rows_->by_id.size());
  for (const auto& [id, entry] : rows_->by_id) records.push_back(entry.record);
  const std::string error = internal::WriteFileAtomically(
      options_.snapshot_path, internal::SnapshotText(records, std::time(nullptr)));
  if (error.empty()) {
    snapshot_written_ = true;
    return;
  }
  stats_.errors.fetch_add(1, std::memory_order_relaxed);
  Log(JsonLine("error", "cannot write the api keys snapshot file", {{"error", error}}));
}

void PostgresKeySource::ExportMetrics(metrics::Registry& registry) const {
  using metrics::ReadOf;
  registry.CounterFrom("tollgate_keys_loads_total", "Full key loads from PostgreSQL.",
                       ReadOf(stats_.loads));
  registry.CounterFrom("tollgate_keys_notifications_total", "Key changes notified by PostgreSQL.",
                       ReadOf(stats_.notifications));
  registry.CounterFrom("tollgate_keys_errors_total",
                       "Key source failures (PostgreSQL down, bad queries).",
                       ReadOf(stats_.errors));
  registry.CounterFrom("tollgate_keys_skipped_rows_total", "Malformed api_keys rows skipped.",
                       ReadOf(stats_.skipped_rows));
  registry.Gauge("tollgate_keys_source_connected", "1 while connected to PostgreSQL.",
                 [this] { return stats_.connected.load() ? 1.0 : 0.0; });
}

}  // namespace tollgate::policy
