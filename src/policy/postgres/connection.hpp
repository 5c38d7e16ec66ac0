// One libpq connection of the Postgres key source, driven without blocking: LISTEN/NOTIFY and
// the api_keys queries. Every wait goes through a Wakeup, so it has a deadline and ends when
// the source stops.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <tollgate/core/result.hpp>
#include <vector>

#include "policy/postgres/key_record.hpp"

struct pg_conn;    // libpq's PGconn
struct pg_result;  // libpq's PGresult

namespace tollgate::policy::internal {

using SteadyClock = std::chrono::steady_clock;

// What ended a wait.
enum class Wait { kReady, kTimeout, kWoken, kStopping };

// The key source thread's stop and wake-up signal (an eventfd), and every wait of that thread:
// each also watches the signal, so that none outlives the source. Thread-safe: Wake and Stop
// from any thread; WaitFor from the source's thread only.
class Wakeup {
 public:
  // Errors: eventfd's, as strerror text.
  static core::Result<std::unique_ptr<Wakeup>> Create();
  ~Wakeup();
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;

  void Wake();
  // Wakes the thread; every wait from now on returns kStopping.
  void Stop();
  bool stopping() const { return stopping_; }

  // Waits for `fd` (-1: none) to be readable (writable) until `deadline`. Returns kWoken on a
  // Wake when `return_on_wake` (else keeps waiting), kReady also when poll itself fails (libpq
  // then reports what is wrong with the socket).
  Wait WaitFor(int fd, bool for_write, SteadyClock::time_point deadline, bool return_on_wake);

 private:
  explicit Wakeup(int fd) : fd_(fd) {}

  const int fd_;
  std::atomic<bool> stopping_{false};
};

// "postgres://user@host:port/db": `url` (a URL or key=value string) as logs may show it, without
// its password. Errors: libpq's, when it cannot parse `url`.
core::Result<std::string> UrlShown(const std::string& url);

// Not thread-safe: the source's thread only.
class Connection {
 public:
  // A server notice, as one line.
  using NoticeCallback = std::function<void(const std::string& notice)>;

  // Connects to `url` within `connect_timeout_ms`; each query then has `query_timeout_ms`.
  // Errors: libpq's message as one line, a timeout, or "stopping".
  static core::Result<std::unique_ptr<Connection>> Open(const std::string& url,
                                                        int connect_timeout_ms,
                                                        int query_timeout_ms, Wakeup& wakeup,
                                                        NoticeCallback on_notice);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int socket() const;
  bool IsBad() const;

  // LISTENs on the channel the api_keys trigger notifies (migrations/001_api_keys.sql). False,
  // with `error` set, when the connection failed.
  bool Listen(std::string& error);
  // The active rows of api_keys: all of them, or those of `key_ids`.
  core::Result<std::vector<KeyRecord>> SelectActive();
  core::Result<std::vector<KeyRecord>> SelectActiveByIds(const std::vector<std::string>& key_ids);

  // Reads what the socket holds. False: the connection is gone.
  bool ConsumeInput(std::string& error);
  // Appends the key ids of the notifications received so far ("*": resync everything) to
  // `key_ids`; returns how many there were.
  size_t TakeNotifications(std::vector<std::string>& key_ids);

 private:
  struct PgResultFree {
    void operator()(pg_result* r) const;
  };
  using PgResult = std::unique_ptr<pg_result, PgResultFree>;

  Connection(pg_conn* conn, int query_timeout_ms, Wakeup& wakeup, NoticeCallback on_notice);
  // Connects within the deadline (libpq's PQconnectPoll loop).
  std::string Establish(int connect_timeout_ms);
  // Runs one statement with text parameters; notifications that arrive meanwhile stay queued.
  core::Result<PgResult> Exec(const std::string& sql, const std::vector<std::string>& params);
  // Sends what libpq buffered; "" or the error (`timed_out` at the deadline).
  std::string Flush(SteadyClock::time_point deadline, const std::string& timed_out);
  // Reads the statement's results until libpq has no more; the first one, or the error.
  core::Result<PgResult> AwaitResult(SteadyClock::time_point deadline,
                                     const std::string& timed_out);
  core::Result<std::vector<KeyRecord>> Select(const std::string& sql,
                                              const std::vector<std::string>& params);
  static void OnNotice(void* self, const char* message);

  pg_conn* const conn_;
  const int query_timeout_ms_;
  Wakeup& wakeup_;
  const NoticeCallback on_notice_;
};

}  // namespace tollgate::policy::internal
