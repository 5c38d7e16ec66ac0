#include <fcntl.h>
#include <libpq-fe.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <tollgate/policy/postgres_keys.hpp>

namespace json = boost::json;

namespace tollgate::policy {
namespace internal {

// One api_keys row as read (or as kept in the snapshot file), before it is checked. Text, as
// PostgreSQL's text format gives it: the checks are the same whatever the origin.
struct KeyRecord {
  std::string key_sha256;
  std::string key_id;
  std::string account_id;
  std::string plan;
  std::string rate_limit_per_minute;
  std::string rate_limit_burst;
  std::string overrides;  // JSON text; empty: NULL
  bool operator==(const KeyRecord&) const = default;
};

}  // namespace internal

namespace {

using internal::KeyRecord;
using SteadyClock = std::chrono::steady_clock;

// The trigger of migrations/001_api_keys.sql notifies this channel with the key id; "*" (after
// a TRUNCATE) asks for a full resync.
constexpr const char* kChannel = "tollgate_api_keys";
constexpr int kSnapshotVersion = 1;
constexpr int kFirstBackoffMs = 100;
constexpr auto kFailureLogInterval = std::chrono::seconds(30);

constexpr const char* kSelectActive =
    "SELECT key_sha256, key_id, account_id, plan, rate_limit_per_minute, rate_limit_burst, "
    "overrides::text FROM api_keys WHERE status = 'active'";
constexpr const char* kSelectActiveByIds =
    "SELECT key_sha256, key_id, account_id, plan, rate_limit_per_minute, rate_limit_burst, "
    "overrides::text FROM api_keys WHERE status = 'active' AND key_id = ANY($1::text[])";

struct PgResultFree {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, PgResultFree>;

// libpq messages end in newlines and may span lines; logs want one line.
std::string OneLine(const char* text) {
  std::string s = text ? text : "";
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s.empty() ? "unknown error" : s;
}

std::string JsonLine(std::string_view level, std::string_view msg,
                     const json::object& fields = {}) {
  json::object o;
  o["level"] = level;
  o["msg"] = msg;
  o["source"] = "postgres_keys";
  for (const auto& kv : fields) o[kv.key()] = kv.value();
  return json::serialize(o);
}

// "postgres://user@host:port/db": the URL as logs may show it (no password).
core::Result<std::string> UrlShown(const std::string& url) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(url.c_str(), &err);
  if (!opts) {
    std::string e = err ? OneLine(err) : "cannot parse";
    if (err) PQfreemem(err);
    return core::Error{e};
  }
  std::map<std::string, std::string> v;
  for (PQconninfoOption* o = opts; o->keyword; ++o) {
    if (o->val && *o->val) v[o->keyword] = o->val;
  }
  PQconninfoFree(opts);
  std::string host = v.count("host")       ? v["host"]
                     : v.count("hostaddr") ? v["hostaddr"]
                                           : "localhost";
  std::string out = "postgres://";
  if (v.count("user")) out += v["user"] + "@";
  out += host;
  if (v.count("port")) out += ":" + v["port"];
  out += "/" + (v.count("dbname") ? v["dbname"] : "");
  return out;
}

// {"a","b\"c"}: a text[] literal for ANY($1::text[]).
std::string TextArray(const std::vector<std::string>& items) {
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ',';
    out += '"';
    for (char c : items[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + "}";
}

std::optional<int64_t> ParseInt(const std::string& s) {
  int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// A JSON number as the decimal text the YAML loader reads (0.5, not 5E-1).
std::optional<std::string> ScalarText(const json::value& v) {
  char buf[64];
  switch (v.kind()) {
    case json::kind::string:
      return std::string(v.get_string());
    case json::kind::int64:
      return std::to_string(v.get_int64());
    case json::kind::uint64:
      return std::to_string(v.get_uint64());
    case json::kind::double_: {
      const auto r = std::to_chars(buf, buf + sizeof buf, v.get_double(), std::chars_format::fixed);
      if (r.ec != std::errc()) return std::nullopt;
      return std::string(buf, r.ptr);
    }
    case json::kind::bool_:
      return std::string(v.get_bool() ? "true" : "false");
    default:
      return std::nullopt;
  }
}

// The overrides column ({"burst": {"capacity": 5000, "expires": "2026-12-31"}}) checked against
// the key's plan by the YAML loader's own rules. Errors name the field under "overrides".
core::Result<std::vector<config::OverrideConfig>> ParseOverridesJson(
    const std::string& text, const config::PlanConfig& plan) {
  boost::system::error_code ec;
  const json::value v = json::parse(text, ec);
  if (ec) return core::Error{"overrides: not valid JSON: " + ec.message()};
  if (v.is_null()) return std::vector<config::OverrideConfig>{};
  if (!v.is_object())
    return core::Error{"overrides: must be a JSON object of limit name -> fields"};
  config::OverrideFields fields;
  for (const auto& [name, body] : v.get_object()) {
    const std::string path = "overrides." + std::string(name);
    if (!body.is_object()) return core::Error{path + ": must be a JSON object of fields"};
    auto& out = fields[std::string(name)];
    for (const auto& [field, value] : body.get_object()) {
      auto s = ScalarText(value);
      if (!s)
        return core::Error{path + "." + std::string(field) + ": must be a number or a string"};
      out[std::string(field)] = *s;
    }
  }
  auto parsed = config::ParseOverrides(fields, plan);
  if (!parsed) return core::Error{"overrides." + parsed.error()};
  return std::move(parsed).value();
}

struct Problem {
  std::string error;
  std::string action;
};

// The key a row stands for, with what was wrong with it. nullopt: the row cannot be used.
std::optional<config::KeyConfig> CheckRow(const KeyRecord& r,
                                          const std::vector<config::PlanConfig>& plans,
                                          std::vector<Problem>& problems) {
  if (r.key_id.empty()) {
    problems.push_back({"key_id: must not be empty", "row skipped"});
    return std::nullopt;
  }
  // These travel in the X-Tollgate-* fields of upstream requests: a CR/LF would inject lines.
  for (const auto& [field, value] : {std::pair<const char*, const std::string*>{"key_id", &r.key_id},
                                     {"account_id", &r.account_id}, {"plan", &r.plan}}) {
    if (!config::IsFieldSafe(*value)) {
      problems.push_back({std::string(field) + ": must not contain control characters", "row skipped"});
      return std::nullopt;
    }
  }
  config::KeyConfig k;
  k.id = r.key_id;
  // char(64) pads with spaces; digests compare in lowercase.
  k.sha256_hex = r.key_sha256;
  while (!k.sha256_hex.empty() && k.sha256_hex.back() == ' ') k.sha256_hex.pop_back();
  for (char& c : k.sha256_hex) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (k.sha256_hex.size() != 64 ||
      k.sha256_hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    problems.push_back(
        {"key_sha256: must be 64 hex digits (the SHA-256 of the key)", "row skipped"});
    return std::nullopt;
  }
  k.account = r.account_id.empty() ? r.key_id : r.account_id;  // as in the YAML keys
  k.plan = r.plan;
  const config::PlanConfig* plan = nullptr;
  for (const auto& p : plans)
    if (p.name == r.plan) plan = &p;
  if (!plan) {
    // DESIGN.md: an unknown plan gets the strictest plan (Policy::Build resolves it).
    problems.push_back({"plan: unknown plan '" + r.plan + "'",
                        "key loaded with the strictest plan, without per-key values"});
    return k;
  }
  const auto per_minute = ParseInt(r.rate_limit_per_minute);
  const auto burst = ParseInt(r.rate_limit_burst);
  if (!per_minute) {
    problems.push_back(
        {"rate_limit_per_minute: must be an integer, got '" + r.rate_limit_per_minute + "'",
         "key loaded without its per-key limit"});
  } else if (!burst) {
    problems.push_back({"rate_limit_burst: must be an integer, got '" + r.rate_limit_burst + "'",
                        "key loaded without its per-key limit"});
  } else if (auto limit = config::KeyWindowLimit(*per_minute, *burst); !limit) {
    problems.push_back({limit.error(), "key loaded without its per-key limit"});
  } else {
    k.rate_limit_per_minute = per_minute;
    k.rate_limit_burst = burst;
  }
  if (!r.overrides.empty()) {
    auto overrides = ParseOverridesJson(r.overrides, *plan);
    if (overrides) {
      k.overrides = std::move(overrides).value();
    } else {
      problems.push_back({overrides.error(), "key loaded without its overrides"});
    }
  }
  return k;
}

// The snapshot file: {"version":1,"written_at":...,"keys":[{...}, ...]} with one row per line.
json::object RecordJson(const KeyRecord& r) {
  json::object o;
  o["key_sha256"] = r.key_sha256;
  o["key_id"] = r.key_id;
  o["account_id"] = r.account_id;
  o["plan"] = r.plan;
  // Numbers as numbers when they are; anything else is kept as text to be refused again on load.
  for (auto [name, text] : {std::pair{"rate_limit_per_minute", &r.rate_limit_per_minute},
                            {"rate_limit_burst", &r.rate_limit_burst}}) {
    if (auto n = ParseInt(*text))
      o[name] = *n;
    else
      o[name] = *text;
  }
  if (r.overrides.empty()) {
    o["overrides"] = nullptr;
  } else {
    boost::system::error_code ec;
    json::value v = json::parse(r.overrides, ec);
    if (ec)
      o["overrides"] = r.overrides;
    else
      o["overrides"] = std::move(v);
  }
  return o;
}

KeyRecord RecordFromJson(const json::value& v) {
  KeyRecord r;
  if (!v.is_object()) return r;  // no key_id: refused by CheckRow, logged and counted
  const json::object& o = v.get_object();
  auto text = [&](const char* name) -> std::string {
    const json::value* f = o.if_contains(name);
    if (!f || f->is_null()) return "";
    if (auto s = ScalarText(*f)) return *s;
    return json::serialize(*f);
  };
  r.key_sha256 = text("key_sha256");
  r.key_id = text("key_id");
  r.account_id = text("account_id");
  r.plan = text("plan");
  r.rate_limit_per_minute = text("rate_limit_per_minute");
  r.rate_limit_burst = text("rate_limit_burst");
  if (const json::value* ov = o.if_contains("overrides"); ov && !ov->is_null()) {
    r.overrides = json::serialize(*ov);
  }
  return r;
}

// The rows of the snapshot file, or an error that completes the sentence "..., and <error>".
core::Result<std::vector<KeyRecord>> ReadSnapshotFile(const std::string& path) {
  if (path.empty()) return core::Error{"no snapshot file is configured (snapshot_path is empty)"};
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return core::Error{"there is no snapshot file at '" + path + "'"};
    return core::Error{"the snapshot file '" + path + "' cannot be read: " + std::strerror(errno)};
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bad = "the snapshot file '" + path + "' cannot be used: ";
  boost::system::error_code ec;
  const json::value root = json::parse(ss.str(), ec);
  if (ec) return core::Error{bad + "not valid JSON (" + ec.message() + ")"};
  const json::object* o = root.if_object();
  const json::value* version = o ? o->if_contains("version") : nullptr;
  if (!version || !version->is_int64() || version->get_int64() != kSnapshotVersion) {
    return core::Error{bad + "version: must be " + std::to_string(kSnapshotVersion)};
  }
  const json::value* keys = o->if_contains("keys");
  if (!keys || !keys->is_array()) return core::Error{bad + "keys: must be a list"};
  std::vector<KeyRecord> out;
  for (const json::value& k : keys->get_array()) out.push_back(RecordFromJson(k));
  return out;
}

// Writes `text` to `path` through a temporary file and a rename: readers see the old file or
// the new one, never half of one.
std::string WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create '" + tmp + "': " + std::strerror(errno);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string e = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return "cannot write '" + tmp + "': " + e;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string e = std::strerror(errno);
    ::unlink(tmp.c_str());
    return "cannot write '" + tmp + "': " + e;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string e = std::strerror(errno);
    ::unlink(tmp.c_str());
    return "cannot rename '" + tmp + "' to '" + path + "': " + e;
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);  // the rename itself survives a crash
    ::close(dfd);
  }
  return "";
}

std::vector<KeyRecord> RecordsOf(const PGresult* r) {
  std::vector<KeyRecord> out;
  const int n = PQntuples(r);
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto col = [&](int c) {
      return PQgetisnull(r, i, c) ? std::string() : std::string(PQgetvalue(r, i, c));
    };
    KeyRecord rec{col(0), col(1), col(2), col(3), col(4), col(5), col(6)};
    // jsonb prints {"a": 1}, the snapshot file {"a":1}: one spelling, so that a row read back
    // from the file compares equal to the same row read from PostgreSQL.
    boost::system::error_code ec;
    if (!rec.overrides.empty()) {
      const json::value v = json::parse(rec.overrides, ec);
      if (!ec) rec.overrides = json::serialize(v);
    }
    out.push_back(std::move(rec));
  }
  return out;
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
    std::vector<Problem> problems;
    Entry e{r, CheckRow(r, plans, problems)};
    if (!problems.empty()) stats.skipped_rows.fetch_add(1, std::memory_order_relaxed);
    for (const Problem& p : problems) {
      source.Log(JsonLine("error", "malformed api_keys row",
                          {{"key_id", r.key_id}, {"error", p.error}, {"action", p.action}}));
    }
    return e;
  }
};

// One libpq connection in non-blocking mode; every wait goes through the source's WaitFor, so
// it has a deadline and ends when the source stops. Not thread-safe: the source's thread only.
class PostgresKeySource::Connection {
 public:
  Connection(PostgresKeySource& source, PGconn* conn) : source_(source), conn_(conn) {
    PQsetNoticeProcessor(conn_, &Connection::OnNotice, this);
  }
  ~Connection() { PQfinish(conn_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int socket() const { return PQsocket(conn_); }
  bool IsBad() const { return PQstatus(conn_) == CONNECTION_BAD || PQsocket(conn_) < 0; }

  // Runs one statement with text parameters; notifications that arrive meanwhile stay queued.
  core::Result<PgResult> Exec(const std::string& sql, const std::vector<std::string>& params) {
    std::vector<const char*> values;
    for (const auto& p : params) values.push_back(p.c_str());
    if (!PQsendQueryParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr,
                           values.data(), nullptr, nullptr, 0)) {
      return core::Error{OneLine(PQerrorMessage(conn_))};
    }
    const auto deadline =
        SteadyClock::now() + std::chrono::milliseconds(source_.options_.query_timeout_ms);
    const std::string timed_out = "no answer within query_timeout_ms (" +
                                  std::to_string(source_.options_.query_timeout_ms) + " ms)";
    for (;;) {
      const int f = PQflush(conn_);
      if (f == 0) break;
      if (f < 0) return core::Error{OneLine(PQerrorMessage(conn_))};
      const Wait w = source_.WaitFor(socket(), true, deadline, false);
      if (w == Wait::kTimeout) return core::Error{timed_out};
      if (w == Wait::kStopping) return core::Error{"stopping"};
    }
    PgResult first;
    for (;;) {
      bool done = false;
      while (!done && !PQisBusy(conn_)) {
        PGresult* r = PQgetResult(conn_);
        if (!r)
          done = true;
        else if (!first)
          first.reset(r);
        else
          PQclear(r);
      }
      if (done) break;
      const Wait w = source_.WaitFor(socket(), false, deadline, false);
      if (w == Wait::kTimeout) return core::Error{timed_out};
      if (w == Wait::kStopping) return core::Error{"stopping"};
      if (!PQconsumeInput(conn_)) return core::Error{OneLine(PQerrorMessage(conn_))};
    }
    if (!first) return core::Error{OneLine(PQerrorMessage(conn_))};
    const ExecStatusType st = PQresultStatus(first.get());
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      return core::Error{OneLine(PQresultErrorMessage(first.get()))};
    }
    return first;
  }

  // Reads what the socket holds. False: the connection is gone.
  bool ConsumeInput(std::string& error) {
    if (!PQconsumeInput(conn_) || PQstatus(conn_) == CONNECTION_BAD) {
      error = OneLine(PQerrorMessage(conn_));
      return false;
    }
    return true;
  }

  // The key ids of the notifications received so far.
  void TakeNotifications(std::vector<std::string>& key_ids) {
    while (PGnotify* n = PQnotifies(conn_)) {
      key_ids.emplace_back(n->extra ? n->extra : "");
      PQfreemem(n);
      source_.stats_.notifications.fetch_add(1, std::memory_order_relaxed);
    }
  }

 private:
  static void OnNotice(void* self, const char* message) {
    auto* c = static_cast<Connection*>(self);
    c->source_.Log(JsonLine("warn", "postgres notice", {{"notice", OneLine(message)}}));
  }

  PostgresKeySource& source_;
  PGconn* conn_;
};

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
  if (options.url.empty()) return core::Error{what + "url: required"};
  if (options.plans.empty()) return core::Error{what + "plans: at least one plan is required"};
  if (options.resync_seconds < 1) return core::Error{what + "resync_seconds: must be >= 1"};
  if (options.reconnect_max_ms < kFirstBackoffMs) {
    return core::Error{what + "reconnect_max_ms: must be >= " + std::to_string(kFirstBackoffMs)};
  }
  if (options.connect_timeout_ms < 1) return core::Error{what + "connect_timeout_ms: must be >= 1"};
  if (options.query_timeout_ms < 1) return core::Error{what + "query_timeout_ms: must be >= 1"};
  auto shown = UrlShown(options.url);
  if (!shown) return core::Error{what + "url: " + shown.error()};

  std::unique_ptr<PostgresKeySource> s(
      new PostgresKeySource(std::move(options), std::move(on_change), std::move(log)));
  s->url_shown_ = *shown;
  s->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->wake_fd_ < 0) return core::Error{what + "eventfd: " + std::strerror(errno)};

  std::string db_error;
  if (auto c = s->Connect(); c) {
    s->conn_ = std::move(c).value();
    if (!s->Listen(db_error) || !s->FullLoad(db_error)) s->conn_.reset();
  } else {
    db_error = c.error();
  }
  if (s->conn_) {
    s->stats_.connected = true;
    s->Log(JsonLine("info", "api keys loaded from PostgreSQL",
                    {{"url", s->url_shown_}, {"keys", s->Keys().size()}}));
  } else {
    s->stats_.errors.fetch_add(1, std::memory_order_relaxed);
    if (db_error.find("\"api_keys\" does not exist") != std::string::npos) {
      db_error += "; apply migrations/001_api_keys.sql";
    }
    auto records = ReadSnapshotFile(s->options_.snapshot_path);
    if (!records) {
      return core::Error{"cannot load API keys: PostgreSQL at " + s->url_shown_ + " failed (" +
                         db_error + "), and " + records.error()};
    }
    s->ReplaceAll(std::move(records).value());
    s->Publish(true);
    s->stats_.using_snapshot_file = true;
    s->Log(JsonLine("warn",
                    "PostgreSQL unreachable at start; serving the keys of the snapshot file",
                    {{"url", s->url_shown_},
                     {"error", db_error},
                     {"snapshot_path", s->options_.snapshot_path},
                     {"keys", s->Keys().size()}}));
  }
  s->notify_ = true;
  s->thread_ = std::thread([p = s.get()] { p->Run(); });
  return s;
}

PostgresKeySource::~PostgresKeySource() {
  stopping_ = true;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
  conn_.reset();
  if (wake_fd_ >= 0) ::close(wake_fd_);
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
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void PostgresKeySource::Log(const std::string& line) const {
  if (log_) {
    log_(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

PostgresKeySource::Wait PostgresKeySource::WaitFor(int fd, bool for_write,
                                                   SteadyClock::time_point deadline,
                                                   bool return_on_wake) {
  for (;;) {
    if (stopping_) return Wait::kStopping;
    const auto now = SteadyClock::now();
    if (now >= deadline) return Wait::kTimeout;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
    pollfd fds[2] = {{wake_fd_, POLLIN, 0},
                     {fd, static_cast<short>(for_write ? POLLOUT : POLLIN), 0}};
    const int n = ::poll(fds, fd >= 0 ? 2 : 1, static_cast<int>(std::min<int64_t>(left, 60'000)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Wait::kReady;  // let libpq report what is wrong with the socket
    if (fds[0].revents) {
      uint64_t value;
      [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &value, sizeof value);
      if (stopping_) return Wait::kStopping;
      if (return_on_wake) return Wait::kWoken;
    }
    if (fd >= 0 && fds[1].revents) return Wait::kReady;
  }
}

core::Result<std::unique_ptr<PostgresKeySource::Connection>> PostgresKeySource::Connect() {
  // Defaults first: the URL, expanded from dbname, may override them. Keepalives find a dead
  // peer on an idle connection; the query deadline finds a hung one.
  const char* keys[] = {"application_name", "keepalives_idle", "keepalives_interval",
                        "keepalives_count", "dbname",          nullptr};
  const char* values[] = {"tollgate", "30", "10", "3", options_.url.c_str(), nullptr};
  // Name resolution inside PQconnectStartParams blocks (libpq's own limitation); give an IP
  // address (hostaddr) where a slow DNS must not delay a reconnect or the destructor.
  PGconn* raw = PQconnectStartParams(keys, values, 1);
  if (!raw) return core::Error{"out of memory"};
  auto conn = std::make_unique<Connection>(*this, raw);
  if (PQstatus(raw) == CONNECTION_BAD) return core::Error{OneLine(PQerrorMessage(raw))};
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(options_.connect_timeout_ms);
  PostgresPollingStatusType st = PGRES_POLLING_WRITING;  // as libpq's docs say to start
  while (st != PGRES_POLLING_OK) {
    if (st == PGRES_POLLING_FAILED) return core::Error{OneLine(PQerrorMessage(raw))};
    const Wait w = WaitFor(PQsocket(raw), st == PGRES_POLLING_WRITING, deadline, false);
    if (w == Wait::kTimeout) {
      return core::Error{"no connection within connect_timeout_ms (" +
                         std::to_string(options_.connect_timeout_ms) + " ms)"};
    }
    if (w == Wait::kStopping) return core::Error{"stopping"};
    st = PQconnectPoll(raw);
  }
  if (PQsetnonblocking(raw, 1) != 0) return core::Error{OneLine(PQerrorMessage(raw))};
  return conn;
}

bool PostgresKeySource::Listen(std::string& error) {
  auto r = conn_->Exec(std::string("LISTEN ") + kChannel, {});
  if (!r) error = r.error();
  return r.ok();
}

bool PostgresKeySource::FullLoad(std::string& error) {
  auto r = conn_->Exec(kSelectActive, {});
  if (!r) {
    error = r.error();
    return false;
  }
  const bool changed = ReplaceAll(RecordsOf(r->get()));
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
  auto r = conn_->Exec(kSelectActiveByIds, {TextArray(key_ids)});
  if (!r) {
    error = r.error();
    return false;
  }
  std::map<std::string, KeyRecord> found;
  for (KeyRecord& rec : RecordsOf(r->get())) found.emplace(rec.key_id, std::move(rec));
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
  std::string text = "{\"version\":" + std::to_string(kSnapshotVersion) +
                     ",\"written_at_unix_s\":" + std::to_string(std::time(nullptr)) + ",\"keys\":[";
  bool first = true;
  for (const auto& [id, entry] : rows_->by_id) {
    text += first ? "\n" : ",\n";
    text += json::serialize(RecordJson(entry.record));
    first = false;
  }
  text += "\n]}\n";
  const std::string error = WriteFileAtomically(options_.snapshot_path, text);
  if (error.empty()) {
    snapshot_written_ = true;
    return;
  }
  stats_.errors.fetch_add(1, std::memory_order_relaxed);
  Log(JsonLine("error", "cannot write the api keys snapshot file", {{"error", error}}));
}

void PostgresKeySource::Run() {
  std::minstd_rand rng(std::random_device{}());
  auto jittered = [&](int ms) {
    return std::chrono::milliseconds(std::uniform_int_distribution<int>(ms / 2, ms)(rng));
  };
  const auto resync = std::chrono::seconds(options_.resync_seconds);
  int backoff_ms = kFirstBackoffMs;
  bool had_connection = conn_ != nullptr;
  auto retry_at = SteadyClock::now() + jittered(backoff_ms);
  auto next_resync = SteadyClock::now() + resync;
  std::optional<SteadyClock::time_point> last_failure_log;  // unset: the next failure is logged
  uint64_t failed_attempts = 0;

  // The backoff and the log interval start again only after a good full load, so a server
  // that accepts connections and then fails every query is not hammered, nor logged non-stop.
  auto drop = [&](const std::string& why) {
    conn_.reset();
    stats_.connected = false;
    stats_.errors.fetch_add(1, std::memory_order_relaxed);
    const auto now = SteadyClock::now();
    if (!last_failure_log || now - *last_failure_log >= kFailureLogInterval) {
      Log(JsonLine("error", "lost PostgreSQL; serving the keys held",
                   {{"url", url_shown_}, {"error", why}}));
      last_failure_log = now;
    }
    retry_at = now + jittered(backoff_ms);
    backoff_ms = std::min(backoff_ms * 2, options_.reconnect_max_ms);
  };

  while (!stopping_) {
    try {
      ApplyPendingPlans();
      if (!conn_) {
        if (SteadyClock::now() < retry_at) {
          WaitFor(-1, false, retry_at, true);
          continue;
        }
        std::string error;
        if (auto c = Connect(); c) {
          conn_ = std::move(c).value();
          if (!Listen(error)) conn_.reset();
        } else {
          error = c.error();
        }
        if (stopping_) break;
        const auto now = SteadyClock::now();
        if (!conn_) {
          // Counted every time, logged at a bounded rate (the first, then every 30 s).
          stats_.errors.fetch_add(1, std::memory_order_relaxed);
          ++failed_attempts;
          if (!last_failure_log || now - *last_failure_log >= kFailureLogInterval) {
            Log(JsonLine("error", "cannot reach PostgreSQL; serving the keys held",
                         {{"url", url_shown_}, {"error", error}, {"attempts", failed_attempts}}));
            last_failure_log = now;
          }
          retry_at = now + jittered(backoff_ms);
          backoff_ms = std::min(backoff_ms * 2, options_.reconnect_max_ms);
          continue;
        }
        // Connected and listening (so nothing committed from now on is missed): the stats say
        // so before the resync publishes its keys.
        stats_.connected = true;
        if (had_connection) stats_.reconnects.fetch_add(1, std::memory_order_relaxed);
        had_connection = true;
        Log(JsonLine("info", "PostgreSQL connected; resyncing api keys",
                     {{"url", url_shown_}, {"failed_attempts", failed_attempts}}));
        failed_attempts = 0;
        next_resync = now + resync;
        if (!FullLoad(error)) {
          if (!stopping_) drop(error);
          continue;
        }
        backoff_ms = kFirstBackoffMs;
        last_failure_log.reset();
        continue;
      }
      std::vector<std::string> ids;
      std::string error;
      conn_->TakeNotifications(ids);
      if (!ids.empty()) {
        if (!LoadIds(std::move(ids), error) && !stopping_) drop(error);
        continue;
      }
      if (SteadyClock::now() >= next_resync) {
        if (!FullLoad(error) && !stopping_) drop(error);
        next_resync = SteadyClock::now() + resync;
        continue;
      }
      if (conn_->IsBad()) {
        drop("the connection is closed");
      } else if (WaitFor(conn_->socket(), false, next_resync, true) == Wait::kReady &&
                 !conn_->ConsumeInput(error)) {
        drop(error);
      }
    } catch (const std::exception& e) {
      // Nothing here throws by design; if something does, the keys held keep serving.
      stats_.errors.fetch_add(1, std::memory_order_relaxed);
      Log(JsonLine("error", "postgres key source failed; reconnecting", {{"error", e.what()}}));
      conn_.reset();
      stats_.connected = false;
      retry_at = SteadyClock::now() + std::chrono::milliseconds(options_.reconnect_max_ms);
    }
  }
  conn_.reset();
  stats_.connected = false;
}

}  // namespace tollgate::policy
