// RedisStore: one budget per key shared by every gateway replica, one round trip per decision.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <tollgate/core/result.hpp>
#include <tollgate/store/store.hpp>

namespace boost::asio {
class io_context;
}

namespace tollgate::metrics {
class Registry;
}

namespace tollgate::store {

namespace redis {  // the implementation's rooms (src/store/redis/)
class Lane;
struct SharedState;
}  // namespace redis

struct RedisStoreOptions {
  // redis://[user:password@]host:port[/db] (standalone),
  // redis-cluster://host:port[,host:port...] (Redis Cluster; seeds for the slot map), or
  // redis-sentinel://[user:password@]MASTER@host:port[,host:port...][/db] (Redis Sentinel: the
  // sentinels, which name the master known as MASTER; the credentials and database are the
  // master's); rediss:// and rediss-cluster:// for the first two over TLS.
  std::string url = "redis://127.0.0.1:6379";
  // Key prefix: keys are <prefix>:{<scope>}:<check>:<algorithm>. Environments sharing a Redis
  // must use different prefixes. Default "tollgate".
  std::string prefix = "tollgate";
  // Deadline of one decision, from Apply() to the reply. Default 5 ms.
  int timeout_ms = 5;
  // Deadline to connect (and authenticate). Default 1000 ms.
  int connect_timeout_ms = 1000;
  // Consecutive failures that open the circuit breaker; while open, calls fail at once
  // (kUnavailable) and one probe per `breaker_open_ms` checks whether Redis is back.
  int breaker_failures = 5;
  int breaker_open_ms = 500;
  // TLS (rediss://, rediss-cluster://), PEM files. The server's certificate is verified against
  // `tls_ca_file` (empty: the system's CAs) and the URL's host. A client certificate and its
  // key, for servers that ask for one (`tls-auth-clients yes`).
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
};

// A reply of a plain command: nil, an integer, a string (bulk or status), an error, or an array.
struct RedisValue {
  struct Error {
    std::string message;
  };
  std::variant<std::monostate, long long, std::string, Error, std::vector<RedisValue>> v;
};

// Counters for /metrics. Thread-safe (relaxed atomics).
struct RedisStoreStats {
  std::atomic<uint64_t> calls{0};    // decisions sent
  std::atomic<uint64_t> scripts{0};  // script calls sent for them (a group is one)
  std::atomic<uint64_t> timeouts{0};
  std::atomic<uint64_t> errors{0};          // connection and protocol failures
  std::atomic<uint64_t> command_errors{0};  // FireAndForget replies that were errors or failures
  std::atomic<uint64_t> breaker_rejections{0};  // failed at once: circuit open
  std::atomic<uint64_t> noscript{0};            // script reloaded after NOSCRIPT
  std::atomic<uint64_t> redirects{0};           // MOVED / ASK followed
  std::atomic<uint64_t> reconnects{0};
  std::atomic<uint64_t> master_switches{0};  // Sentinel: new masters followed (once per failover)
  std::atomic<int> breaker_open{0};          // 1 while the circuit is open
};

// Thread-safe: Apply() may be called from any thread. The store runs its own I/O thread, with
// one connection per Redis node; commands issued while a write is in flight leave together in
// the next write (auto-pipelining). Completions run on the store's thread.
//
// Lanes: a server with an event loop per thread gives each loop a lane (AddLane), a connection
// per node run by that loop, and each loop's thread enters its lane (EnterLane). Decisions made
// on that thread then go out and complete on it: no hand-over to the store's thread and back.
// Each lane has its own pipeline and deadlines; the circuit breaker and statistics are shared.
class RedisStore final : public Store {
 public:
  // Parses the URL and starts the I/O thread; connections open lazily and reconnect with
  // backoff. Errors: a malformed URL.
  static core::Result<std::unique_ptr<RedisStore>> Create(RedisStoreOptions options);
  ~RedisStore() override;

  void Apply(const Batch& batch, std::span<core::Decision> decisions, Completion done) override;
  std::string_view Name() const override { return "redis"; }

  const RedisStoreStats& stats() const;
  // Declares the store's counters and the breaker's gauge (read when /metrics is rendered).
  void ExportMetrics(metrics::Registry& registry) const;
  // Why the last connection to Redis failed ("host:port: reason"), for the logs; "" if none has.
  std::string LastError() const;

  // Sends one plain command (e.g. {"HINCRBY", key, field, "1"}) to the node that owns the slot of
  // `args[key_index]`, in the same pipeline as decisions, following MOVED and ASK; `done` runs on
  // the store's thread. Connection failures and timeouts give an error; a Redis error reply is a
  // RedisValue::Error.
  void Command(std::vector<std::string> args, size_t key_index,
               std::function<void(core::Result<RedisValue>)> done);

  // Plain commands whose replies nobody reads (usage counts), handed to the store's thread in
  // one go and pipelined with decisions: each `command` holds `replies` RESP-encoded requests
  // (EncodeCommand) for the node of `slot` (KeySlot of their key). A failure or error reply
  // counts in stats().command_errors; `done`, if set, gets each reply's outcome, on the store's
  // thread. kNotRun: Redis did not run it, so it may be sent again: the connection failed before
  // it was written, or a cluster node redirected it (MOVED, ASK, TRYAGAIN; the slot map is
  // refreshed, so it goes to the right node next time); kFailed: another error reply, or a
  // failure after it was written.
  enum class FireResult { kOk, kNotRun, kFailed };
  struct Fire {
    std::string command;
    int slot = 0;
    std::function<void(FireResult)> done;
    size_t replies = 1;
  };
  void FireAndForget(std::vector<Fire> commands);
  // The Redis Cluster slot of a key (of its {hash tag}, if it has one).
  static int KeySlot(std::string_view key);
  static void EncodeCommand(std::string& out, std::initializer_list<std::string_view> args);

  // The keys of `batch`'s checks under `prefix` (<prefix>:{<scope>}:<check>:<algorithm>): what
  // DEL takes to forget them (POST /admin/reset).
  static std::vector<std::string> KeysOf(std::string_view prefix, const Batch& batch);

  // Gives `tokens` back to the token bucket `name` of `scope` under `prefix`: a lease's unspent
  // tokens (LeasingStore). The bucket's deficit falls by them, never below a full bucket; on
  // Redis's clock. `unit`: the bucket's units per token; `rate`: its refill units per
  // microsecond (core::Rate). Fire and forget: a failure leaves the tokens spent (exact: never
  // more than the limit).
  void GiveBack(std::string_view prefix, std::string_view scope, std::string_view name,
                int64_t tokens, int64_t unit, int64_t rate);

  // The Lua script every decision runs (exposed for benchmarks and docs).
  static std::string_view Script();

  // Adds a lane run by `loop` (an io_context run by one thread); returns its index. Before the
  // loop runs. Not thread-safe with Apply() on other lanes.
  size_t AddLane(boost::asio::io_context& loop);
  // On the thread running the lane's loop: this thread's decisions use that lane.
  void EnterLane(size_t lane);
  // Destroys the lanes; after their loops stopped, before those loops are destroyed.
  void CloseLanes();

 private:
  explicit RedisStore(std::unique_ptr<redis::SharedState> shared);
  std::unique_ptr<redis::SharedState> shared_;  // statistics, the circuit breaker, TLS
  std::unique_ptr<redis::Lane> own_lane_;       // the store's own lane, on its own thread
  std::vector<std::unique_ptr<redis::Lane>> lanes_;
};

}  // namespace tollgate::store
