// One event loop's share of a RedisStore: its connections (one per node), the decisions in
// flight and their deadlines, batching, dispatch to the node of each slot, and the replies.
#pragma once

#include <hiredis/hiredis.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tollgate/store/redis_store.hpp>
#include <vector>

#include "store/redis/circuit_breaker.hpp"
#include "store/redis/cluster.hpp"
#include "store/redis/connection.hpp"
#include "store/redis/script_protocol.hpp"
#include "store/redis/url.hpp"

namespace tollgate::store {
namespace internal {
// The Lua script (src/store/redis_script.lua), embedded at build time (redis_script.cpp.in).
extern const std::string_view kRedisScript;
extern const std::string_view kHeartbeatScript;  // redis_heartbeat.lua
extern const std::string_view kGiveBackScript;   // redis_give_back.lua
}  // namespace internal

namespace redis {

class SentinelWatch;

// What the lanes of one store share. Thread-safe.
struct SharedState {
  SharedState(const RedisStoreOptions& options,
              std::unique_ptr<boost::asio::ssl::context> tls_context)
      : breaker(options.breaker_failures, std::chrono::milliseconds(options.breaker_open_ms),
                stats.breaker_open),
        tls(std::move(tls_context)) {}

  RedisStoreStats stats;
  CircuitBreaker breaker;  // any lane's failures open it for all, any lane's success closes it
  const std::unique_ptr<boost::asio::ssl::context> tls;  // rediss:// and rediss-cluster:// only
  std::mutex error_mu;
  std::string last_error;  // guarded by error_mu: why the last connection failed, for the logs
  std::mutex master_mu;
  NodeAddress master;  // guarded by master_mu: the master the lanes last followed (Sentinel)
};

// One decision in flight. Pooled by its lane and reused (with its buffer), so a decision
// allocates nothing in the steady state. Owned by the lane's thread once submitted; it lives
// while anything refers to it (`refs`): the deadline queue, a timer, and each command sent for
// it whose reply is to come.
struct Call : ScriptRequest {
  Call* next_call() const { return static_cast<Call*>(next); }  // the next of its group

  std::span<core::Decision> decisions;
  std::span<const Check> checks;  // valid until `done` runs (Store::Apply's contract)
  Store::Completion done;
  std::chrono::steady_clock::time_point deadline;
  int slot = 0;
  int redirects = 0;
  int refs = 0;
  bool finished = false;
  bool asking = false;     // sent after ASK: the node is importing its slot
  bool migrating = false;  // answered TRYAGAIN: its slot is moving between nodes
};

// Thread-safe for Apply(), Command() and FireAndForget(); everything else runs on the lane's
// thread, where its connections call the methods under "For its connections".
//
// The store's own lane runs on a thread of its own; a lane on a caller's event loop
// (RedisStore::AddLane) runs on that loop's thread.
class Lane {
 public:
  // `loop`: a caller's event loop, run by one thread; nullptr: a loop and a thread of its own.
  Lane(RedisStoreOptions options, Url url, SharedState& shared, boost::asio::io_context* loop);
  // A lane with its own thread first waits (up to 1 s) for what was sent to be answered, then
  // stops it. A lane on a caller's loop: after the loop stopped.
  ~Lane();
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  // RedisStore's operations (see redis_store.hpp).
  void Apply(const Batch& batch, std::span<core::Decision> decisions, Store::Completion done);
  void Command(std::vector<std::string> args, size_t key_index,
               std::function<void(core::Result<RedisValue>)> done);
  void FireAndForget(std::vector<RedisStore::Fire> commands);

  const RedisStoreOptions& options() const { return options_; }
  const Url& url() const { return url_; }

  // For its connections, on the lane's thread.
  RedisStoreStats& stats() { return shared_.stats; }
  CircuitBreaker& breaker() { return shared_.breaker; }
  boost::asio::ssl::context* tls_context() const { return shared_.tls.get(); }
  void NoteFailure(std::string why);
  SharedState& shared() { return shared_; }
  Connection& Node(const NodeAddress& address);
  // Sends the decisions that waited for the sentinels' first answer (SentinelWatch::Resolving)
  // to the master, or fails them when none is known.
  void DispatchParked();
  // Drops the connection to `address`, if there is one (Connection::Close).
  void CloseNode(const NodeAddress& address, const std::string& why);
  // Sentinel: asks the sentinels which node is the master now (SentinelWatch::Ask). Cluster:
  // asks the cluster for its slot map: each node we know in turn (the seeds, then the masters of
  // the current map) until one answers; if none does, again after a pause. At start, after a
  // MOVED, and after a connection to a node failed: a failover moves that node's slots to a
  // replica, and nobody answers MOVED to a client that cannot reach the old master.
  void RefreshTopology();
  // A group of token-bucket decisions sent as one script call: `first` and the calls linked by
  // `next`, `count` of them.
  struct Group {
    Call* first;
    Call* last;
    size_t count;
  };
  // Takes a batch of `waiting` decisions, dropping those that timed out while they waited, and
  // appends a script call per group to `out`. Returns the groups, valid until the next call;
  // none when nothing waited.
  std::span<const Group> EncodeBatch(std::deque<Call*>& waiting, std::string& out);
  // A decision's reply (or failure); takes over the reference of the command answered.
  void OnReply(Call* call, Connection& conn, const redisReply* r, Failure f);
  // A group's reply: split into its calls; takes over the reference of each.
  void OnGroupReply(Call* first, Connection& conn, const redisReply* r, Failure f);

 private:
  using SteadyClock = std::chrono::steady_clock;

  // Waits (bounded) until every command sent so far has its reply: writes such as usage
  // counts are not lost when the process stops.
  void Drain(std::chrono::milliseconds limit);
  Call* Acquire();  // REQUIRES: mu_ held
  void Release(Call* call);
  Call* PopWaiting(std::deque<Call*>& waiting);
  void StartSubmitted();
  void Start(Call* call, SteadyClock::time_point now);
  void ArmDeadline(SteadyClock::time_point at);
  void OnDeadline();
  void Dispatch(Call* call, Connection& conn, bool asking);
  // A Redis error reply to a decision: NOSCRIPT, a redirect, TRYAGAIN, or an error.
  void OnErrorReply(Call* call, Connection& conn, std::string_view err);
  void RetryWhenMigrating(Call* call);
  void OnScriptReply(Call* call, const redisReply* r);
  void OnFastReply(Call* call, const redisReply* r);
  // `breaker`: the failure counts toward opening the circuit breaker.
  void Finish(Call* call, StoreErrc errc, std::string message, bool breaker = true);
  void Succeed(Call* call, ApplyResult result);
  // Command(): sends `cmd` to `conn` and follows redirects.
  void SendCommand(std::shared_ptr<const std::string> cmd, int slot, Connection& conn, bool asking,
                   int redirects, std::function<void(core::Result<RedisValue>)> done);
  // The outcome of a FireAndForget command's reply; learns the new owner of a slot from MOVED.
  RedisStore::FireResult OnFired(int slot, const Connection& conn, const redisReply* r, Failure f);
  Connection& NodeFor(int slot);
  void AskSlots(std::shared_ptr<std::vector<NodeAddress>> candidates, size_t i);
  // A MOVED reply: `slot` is `node`'s now, and the rest of the map may have changed too.
  void Moved(int slot, const NodeAddress& node);

  SharedState& shared_;
  RedisStoreOptions options_;
  Url url_;
  const std::string sha_;                             // of the script, for EVALSHA
  std::unique_ptr<boost::asio::io_context> own_ioc_;  // the store's own lane only
  boost::asio::io_context& ioc_;
  std::thread thread_;
  std::map<NodeAddress, std::unique_ptr<Connection>> nodes_;
  SlotMap slots_;
  bool refreshing_ = false;
  boost::asio::steady_timer refresh_timer_{ioc_};
  std::unique_ptr<SentinelWatch> sentinels_;  // redis-sentinel:// only
  std::vector<Call*> parked_;                 // waiting for DispatchParked; each holds a ref

  // Calls: submitted by any thread under mu_, started on the lane's thread in batches, so that
  // one wake-up of the thread carries every decision issued meanwhile.
  std::mutex mu_;
  std::vector<Call*> submitted_;             // guarded by mu_
  std::vector<Call*> free_;                  // guarded by mu_
  bool start_posted_ = false;                // guarded by mu_
  std::vector<std::unique_ptr<Call>> pool_;  // guarded by mu_; every call ever made
  std::vector<Call*> released_;              // lane's thread: back to free_ at the next batch
  std::vector<Call*> starting_;              // lane's thread: the batch being started
  // Deadlines: the timeout is the same for every call, so calls expire in the order they
  // started: one queue and one timer instead of a timer per call.
  std::deque<Call*> deadlines_;
  boost::asio::steady_timer deadline_timer_{ioc_};
  bool deadline_armed_ = false;
  // EncodeBatch's scratch: a group's encoder, the groups of a batch, and each slot's open group
  // (-1: none; one entry without a cluster, where every call has slot 0).
  GroupEncoder group_encoder_;
  std::vector<Group> groups_;
  std::vector<int> group_of_slot_ = std::vector<int>(url_.cluster ? kSlots : 1, -1);
  // A reply's integers, decoded. Reused while completions run: they never run the lane's
  // handlers themselves (Apply, Command and FireAndForget post).
  std::vector<int64_t> integers_;
};

}  // namespace redis
}  // namespace tollgate::store
