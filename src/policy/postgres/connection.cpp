#include "policy/postgres/connection.hpp"

#include <libpq-fe.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

namespace tollgate::policy::internal {
namespace {

// The trigger of migrations/001_api_keys.sql notifies this channel with the key id; "*" (after
// a TRUNCATE) asks for a full resync.
constexpr const char* kChannel = "tollgate_api_keys";

// `mode` (migrations/002_api_keys_mode.sql) is read through the row's JSON, so that a table
// without the column still loads (every key then follows its plan).
constexpr const char* kSelectActive =
    "SELECT key_sha256, key_id, account_id, plan, rate_limit_per_minute, rate_limit_burst, "
    "overrides::text, to_jsonb(k) ->> 'mode' FROM api_keys k WHERE status = 'active'";
constexpr const char* kSelectActiveByIds =
    "SELECT key_sha256, key_id, account_id, plan, rate_limit_per_minute, rate_limit_burst, "
    "overrides::text, to_jsonb(k) ->> 'mode' FROM api_keys k WHERE status = 'active' AND "
    "key_id = ANY($1::text[])";

// libpq messages end in newlines and may span lines; logs want one line.
std::string OneLine(const char* text) {
  std::string s = text ? text : "";
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s.empty() ? "unknown error" : s;
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

std::vector<KeyRecord> RecordsOf(const PGresult* r) {
  std::vector<KeyRecord> out;
  const int n = PQntuples(r);
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto col = [&](int c) {
      return PQgetisnull(r, i, c) ? std::string() : std::string(PQgetvalue(r, i, c));
    };
    KeyRecord rec{col(0), col(1), col(2), col(3), col(4), col(5), col(6), col(7)};
    // jsonb prints {"a": 1}, the snapshot file {"a":1}: one spelling, so that a row read back
    // from the file compares equal to the same row read from PostgreSQL.
    if (!rec.overrides.empty()) rec.overrides = CompactJson(rec.overrides);
    out.push_back(std::move(rec));
  }
  return out;
}

}  // namespace

core::Result<std::unique_ptr<Wakeup>> Wakeup::Create() {
  const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return core::Error{std::strerror(errno)};
  return std::unique_ptr<Wakeup>(new Wakeup(fd));
}

Wakeup::~Wakeup() { ::close(fd_); }

void Wakeup::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(fd_, &one, sizeof one);
}

void Wakeup::Stop() {
  stopping_ = true;
  Wake();
}

Wait Wakeup::WaitFor(int fd, bool for_write, SteadyClock::time_point deadline,
                     bool return_on_wake) {
  for (;;) {
    if (stopping_) return Wait::kStopping;
    const auto now = SteadyClock::now();
    if (now >= deadline) return Wait::kTimeout;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
    pollfd fds[2] = {{fd_, POLLIN, 0}, {fd, static_cast<short>(for_write ? POLLOUT : POLLIN), 0}};
    const int n = ::poll(fds, fd >= 0 ? 2 : 1, static_cast<int>(std::min<int64_t>(left, 60'000)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Wait::kReady;  // let libpq report what is wrong with the socket
    if (fds[0].revents) {
      uint64_t value;
      [[maybe_unused]] const ssize_t r = ::read(fd_, &value, sizeof value);
      if (stopping_) return Wait::kStopping;
      if (return_on_wake) return Wait::kWoken;
    }
    if (fd >= 0 && fds[1].revents) return Wait::kReady;
  }
}

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

void Connection::PgResultFree::operator()(PGresult* r) const { PQclear(r); }

Connection::Connection(PGconn* conn, int query_timeout_ms, Wakeup& wakeup, NoticeCallback on_notice)
    : conn_(conn),
      query_timeout_ms_(query_timeout_ms),
      wakeup_(wakeup),
      on_notice_(std::move(on_notice)) {
  PQsetNoticeProcessor(conn_, &Connection::OnNotice, this);
}

Connection::~Connection() { PQfinish(conn_); }

core::Result<std::unique_ptr<Connection>> Connection::Open(const std::string& url,
                                                           int connect_timeout_ms,
                                                           int query_timeout_ms, Wakeup& wakeup,
                                                           NoticeCallback on_notice) {
  // Defaults first: the URL, expanded from dbname, may override them. Keepalives find a dead
  // peer on an idle connection; the query deadline finds a hung one.
  const char* keys[] = {"application_name", "keepalives_idle", "keepalives_interval",
                        "keepalives_count", "dbname",          nullptr};
  const char* values[] = {"tollgate", "30", "10", "3", url.c_str(), nullptr};
  // Name resolution inside PQconnectStartParams blocks (libpq's own limitation); give an IP
  // address (hostaddr) where a slow DNS must not delay a reconnect or the destructor.
  PGconn* raw = PQconnectStartParams(keys, values, 1);
  if (!raw) return core::Error{"out of memory"};
  std::unique_ptr<Connection> conn(
      new Connection(raw, query_timeout_ms, wakeup, std::move(on_notice)));
  if (std::string error = conn->Establish(connect_timeout_ms); !error.empty()) {
    return core::Error{error};
  }
  return conn;
}

std::string Connection::Establish(int connect_timeout_ms) {
  if (PQstatus(conn_) == CONNECTION_BAD) return OneLine(PQerrorMessage(conn_));
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(connect_timeout_ms);
  PostgresPollingStatusType st = PGRES_POLLING_WRITING;  // as libpq's docs say to start
  while (st != PGRES_POLLING_OK) {
    if (st == PGRES_POLLING_FAILED) return OneLine(PQerrorMessage(conn_));
    const Wait w = wakeup_.WaitFor(PQsocket(conn_), st == PGRES_POLLING_WRITING, deadline, false);
    if (w == Wait::kTimeout) {
      return "no connection within connect_timeout_ms (" + std::to_string(connect_timeout_ms) +
             " ms)";
    }
    if (w == Wait::kStopping) return "stopping";
    st = PQconnectPoll(conn_);
  }
  if (PQsetnonblocking(conn_, 1) != 0) return OneLine(PQerrorMessage(conn_));
  return "";
}

int Connection::socket() const { return PQsocket(conn_); }

bool Connection::IsBad() const { return PQstatus(conn_) == CONNECTION_BAD || PQsocket(conn_) < 0; }

bool Connection::Listen(std::string& error) {
  auto r = Exec(std::string("LISTEN ") + kChannel, {});
  if (!r) error = r.error();
  return r.ok();
}

core::Result<std::vector<KeyRecord>> Connection::SelectActive() {
  return Select(kSelectActive, {});
}

core::Result<std::vector<KeyRecord>> Connection::SelectActiveByIds(
    const std::vector<std::string>& key_ids) {
  return Select(kSelectActiveByIds, {TextArray(key_ids)});
}

core::Result<std::vector<KeyRecord>> Connection::Select(const std::string& sql,
                                                        const std::vector<std::string>& params) {
  auto r = Exec(sql, params);
  if (!r) return core::Error{r.error()};
  return RecordsOf(r->get());
}

core::Result<Connection::PgResult> Connection::Exec(const std::string& sql,
                                                    const std::vector<std::string>& params) {
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p.c_str());
  if (!PQsendQueryParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr,
                         values.data(), nullptr, nullptr, 0)) {
    return core::Error{OneLine(PQerrorMessage(conn_))};
  }
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(query_timeout_ms_);
  const std::string timed_out =
      "no answer within query_timeout_ms (" + std::to_string(query_timeout_ms_) + " ms)";
  if (std::string error = Flush(deadline, timed_out); !error.empty()) return core::Error{error};
  auto first = AwaitResult(deadline, timed_out);
  if (!first) return first;
  const ExecStatusType st = PQresultStatus(first->get());
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    return core::Error{OneLine(PQresultErrorMessage(first->get()))};
  }
  return first;
}

std::string Connection::Flush(SteadyClock::time_point deadline, const std::string& timed_out) {
  for (;;) {
    const int f = PQflush(conn_);
    if (f == 0) return "";
    if (f < 0) return OneLine(PQerrorMessage(conn_));
    const Wait w = wakeup_.WaitFor(socket(), true, deadline, false);
    if (w == Wait::kTimeout) return timed_out;
    if (w == Wait::kStopping) return "stopping";
  }
}

core::Result<Connection::PgResult> Connection::AwaitResult(SteadyClock::time_point deadline,
                                                           const std::string& timed_out) {
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
    const Wait w = wakeup_.WaitFor(socket(), false, deadline, false);
    if (w == Wait::kTimeout) return core::Error{timed_out};
    if (w == Wait::kStopping) return core::Error{"stopping"};
    if (!PQconsumeInput(conn_)) return core::Error{OneLine(PQerrorMessage(conn_))};
  }
  if (!first) return core::Error{OneLine(PQerrorMessage(conn_))};
  return first;
}

bool Connection::ConsumeInput(std::string& error) {
  if (!PQconsumeInput(conn_) || PQstatus(conn_) == CONNECTION_BAD) {
    error = OneLine(PQerrorMessage(conn_));
    return false;
  }
  return true;
}

size_t Connection::TakeNotifications(std::vector<std::string>& key_ids) {
  size_t taken = 0;
  while (PGnotify* n = PQnotifies(conn_)) {
    key_ids.emplace_back(n->extra ? n->extra : "");
    PQfreemem(n);
    ++taken;
  }
  return taken;
}

void Connection::OnNotice(void* self, const char* message) {
  auto* c = static_cast<Connection*>(self);
  if (c->on_notice_) c->on_notice_(OneLine(message));
}

}  // namespace tollgate::policy::internal
