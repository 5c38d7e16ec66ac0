#include "store/redis/lane.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <optional>

#include "store/redis/resp.hpp"
#include "store/redis/sentinel.hpp"
#include "store/redis/sentinel_watch.hpp"

namespace tollgate::store::redis {
namespace {

namespace net = boost::asio;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kMaxRedirects = 5;
// Token-bucket requests waiting for a connection leave together, in batches: one script call per
// group of them that shares a slot (a script's keys must share one on a cluster) and a `now`.
// At most this many requests per batch (and kBatchesInFlight batches per connection).
constexpr size_t kMaxBatch = 128;

std::string Sha1Hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha1(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

// `r`'s elements into `out`, when it is an array of `size` integers.
bool IntegerArray(const redisReply* r, size_t size, std::vector<int64_t>& out) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements != size) return false;
  out.clear();
  for (size_t i = 0; i < size; ++i) {
    if (r->element[i]->type != REDIS_REPLY_INTEGER) return false;
    out.push_back(r->element[i]->integer);
  }
  return true;
}

}  // namespace

Lane::Lane(RedisStoreOptions options, Url url, SharedState& shared, net::io_context* loop)
    : shared_(shared),
      options_(std::move(options)),
      url_(std::move(url)),
      sha_(Sha1Hex(internal::kRedisScript)),
      own_ioc_(loop ? nullptr : std::make_unique<net::io_context>(1)),
      ioc_(loop ? *loop : *own_ioc_) {
  if (own_ioc_) {
    thread_ = std::thread([this] {
      auto guard = net::make_work_guard(ioc_);
      ioc_.run();
    });
  }
  if (url_.cluster) net::post(ioc_, [this] { RefreshTopology(); });
  if (url_.sentinel) {
    sentinels_ = std::make_unique<SentinelWatch>(*this, ioc_);
    net::post(ioc_, [this] { sentinels_->Start(); });
  }
}

Lane::~Lane() {
  if (!own_ioc_) return;  // a caller's loop: stopped by its owner before this
  Drain(milliseconds(1000));
  ioc_.stop();
  thread_.join();
}

void Lane::Drain(milliseconds limit) {
  const auto deadline = SteadyClock::now() + limit;
  while (SteadyClock::now() < deadline) {
    std::promise<bool> idle;
    auto f = idle.get_future();
    net::post(ioc_, [this, &idle] {
      bool all = true;
      for (const auto& [a, c] : nodes_) all = all && c->Idle();
      idle.set_value(all);
    });
    if (f.wait_for(limit) != std::future_status::ready || f.get()) return;
    std::this_thread::sleep_for(milliseconds(2));
  }
}

void Lane::NoteFailure(std::string why) {
  std::lock_guard lock(shared_.error_mu);
  shared_.last_error = std::move(why);
}

// ---------------------------------------------------------------------------------------------
// Decisions: submitted by any thread, started on the lane's.

Call* Lane::Acquire() {
  if (free_.empty()) {
    pool_.push_back(std::make_unique<Call>());
    return pool_.back().get();
  }
  Call* call = free_.back();
  free_.pop_back();
  return call;
}

// Lane's thread. Calls go back to the pool in batches (StartSubmitted), without a lock each.
void Lane::Release(Call* call) {
  if (--call->refs > 0) return;
  call->done = nullptr;  // drops what the completion captured, now
  released_.push_back(call);
}

void Lane::Apply(const Batch& batch, std::span<core::Decision> decisions, Store::Completion done) {
  // The request is encoded here, on the caller's thread, into a pooled buffer.
  Call* call;
  {
    std::lock_guard lock(mu_);
    call = Acquire();
  }
  call->decisions = decisions;
  call->checks = batch.checks;
  call->done = std::move(done);
  call->redirects = 0;
  call->finished = false;
  call->asking = call->migrating = false;
  call->refs = 1;  // the submission's; then the deadline queue's
  const std::string_view first_key = EncodeRequest(*call, sha_, options_.prefix, batch);
  call->slot = call->n > 0 && url_.cluster ? HashSlot(first_key) : 0;
  stats().calls.fetch_add(1, std::memory_order_relaxed);
  bool post = false;
  {
    std::lock_guard lock(mu_);
    submitted_.push_back(call);
    post = !start_posted_;
    start_posted_ = true;
  }
  if (post) net::post(ioc_, [this] { StartSubmitted(); });
}

void Lane::StartSubmitted() {
  starting_.clear();
  {
    std::lock_guard lock(mu_);
    starting_.swap(submitted_);
    start_posted_ = false;
    free_.insert(free_.end(), released_.begin(), released_.end());
  }
  released_.clear();
  const auto now = SteadyClock::now();
  for (Call* call : starting_) Start(call, now);
}

void Lane::Start(Call* call, SteadyClock::time_point now) {
  if (!shared_.breaker.Admit(now)) {
    stats().breaker_rejections.fetch_add(1, std::memory_order_relaxed);
    Finish(call, StoreErrc::kUnavailable, "circuit open", false);
    return Release(call);
  }
  call->deadline = now + milliseconds(options_.timeout_ms);
  deadlines_.push_back(call);  // takes over the submission's reference
  if (!deadline_armed_) ArmDeadline(call->deadline);
  if (sentinels_ && sentinels_->Resolving()) {  // no master known yet: wait for the answers
    ++call->refs;
    return parked_.push_back(call);
  }
  Dispatch(call, NodeFor(call->slot), false);
}

void Lane::DispatchParked() {
  std::vector<Call*> parked;
  parked.swap(parked_);
  for (Call* call : parked) {
    if (!call->finished) Dispatch(call, NodeFor(call->slot), false);
    Release(call);
  }
}

void Lane::ArmDeadline(SteadyClock::time_point at) {
  deadline_armed_ = true;
  deadline_timer_.expires_at(at);
  deadline_timer_.async_wait([this](const boost::system::error_code&) { OnDeadline(); });
}

// Times out the calls whose deadline passed, drops the finished ones, and waits for the next.
void Lane::OnDeadline() {
  deadline_armed_ = false;
  const auto now = SteadyClock::now();
  while (!deadlines_.empty() &&
         (deadlines_.front()->finished || deadlines_.front()->deadline <= now)) {
    Call* call = deadlines_.front();
    deadlines_.pop_front();
    if (!call->finished && call->migrating) {  // Redis answers; one slot is moving
      Finish(call, StoreErrc::kUnavailable, "deadline exceeded: slot migrating (TRYAGAIN)", false);
    } else if (!call->finished) {
      stats().timeouts.fetch_add(1, std::memory_order_relaxed);
      Finish(call, StoreErrc::kTimeout, "deadline exceeded");
    }
    Release(call);
  }
  if (!deadlines_.empty() && !deadline_armed_) ArmDeadline(deadlines_.front()->deadline);
}

void Lane::Dispatch(Call* call, Connection& conn, bool asking) {
  call->asking = asking;
  if (asking) {
    conn.Send(kAsking, [](const redisReply*, Failure) {});
  } else if (call->fast) {
    return conn.SendGrouped(call);
  }
  stats().scripts.fetch_add(1, std::memory_order_relaxed);
  conn.Send(call->command, call);
}

Call* Lane::PopWaiting(std::deque<Call*>& waiting) {
  while (!waiting.empty() && waiting.front()->finished) {
    Release(waiting.front());
    waiting.pop_front();
  }
  if (waiting.empty()) return nullptr;
  Call* next = waiting.front();
  waiting.pop_front();
  return next;
}

// A batch is a script call per group: the requests of one slot and one `now`, in their order (a
// key's requests share its slot, so they stay in order); a request whose slot's group has
// another `now` starts a new one.
std::span<const Lane::Group> Lane::EncodeBatch(std::deque<Call*>& waiting, std::string& out) {
  groups_.clear();
  Call* c;
  for (size_t taken = 0; taken < kMaxBatch && (c = PopWaiting(waiting)) != nullptr; ++taken) {
    c->next = nullptr;
    int& index = group_of_slot_[static_cast<size_t>(c->slot)];
    if (index >= 0) {
      Group& g = groups_[static_cast<size_t>(index)];
      if (g.first->now_us == c->now_us) {
        g.last->next = c;
        g.last = c;
        ++g.count;
        continue;
      }
    }
    index = static_cast<int>(groups_.size());
    groups_.push_back({c, c, 1});
  }
  if (groups_.empty()) return {};
  for (const Group& g : groups_) {
    group_of_slot_[static_cast<size_t>(g.first->slot)] = -1;
    if (g.count == 1) {
      out.append(g.first->command);
    } else {
      group_encoder_.Encode(out, sha_, g.first);
    }
  }
  stats().scripts.fetch_add(groups_.size(), std::memory_order_relaxed);
  return groups_;
}

// ---------------------------------------------------------------------------------------------
// Replies to decisions.

void Lane::OnGroupReply(Call* first, Connection& conn, const redisReply* r, Failure f) {
  if (f != Failure::kNone || r->type != REDIS_REPLY_ARRAY) {
    // Nothing was decided (a failure, NOSCRIPT, a redirect): each call goes on as if it had
    // been sent alone and answered so (a redirect or NOSCRIPT sends it again).
    for (Call* c = first; c;) {
      Call* next = c->next_call();
      OnReply(c, conn, r, f);
      c = next;
    }
    return;
  }
  size_t expected = 1;
  for (const Call* c = first; c; c = c->next_call()) expected += c->n;
  const bool valid = IntegerArray(r, expected, integers_);
  const core::Instant now = core::Instant::FromUnixMicros(valid ? integers_[0] : 0);
  size_t at = 1;
  for (Call* c = first; c;) {
    Call* next = c->next_call();
    if (!c->finished && valid) {
      const std::span<const int64_t> deficits =
          std::span<const int64_t>(integers_).subspan(at, c->n);
      Succeed(c, DecideTokenBuckets(c->checks, c->consume, now, deficits, c->decisions));
    } else if (!c->finished) {
      stats().errors.fetch_add(1, std::memory_order_relaxed);
      Finish(c, StoreErrc::kProtocol, "unexpected script reply");
    }
    at += c->n;
    Release(c);
    c = next;
  }
}

void Lane::OnReply(Call* call, Connection& conn, const redisReply* r, Failure f) {
  struct Unref {  // the reference of the command answered, dropped on every way out
    Lane& lane;
    Call* call;
    ~Unref() { lane.Release(call); }
  } unref{*this, call};
  if (call->finished) return;
  if (f != Failure::kNone) {
    stats().errors.fetch_add(1, std::memory_order_relaxed);
    return Finish(call, StoreErrc::kUnavailable,
                  "connection to " + conn.address().host + ":" + conn.address().port + " failed");
  }
  if (r->type == REDIS_REPLY_ERROR)
    return OnErrorReply(call, conn, std::string_view(r->str, r->len));
  if (call->fast) return OnFastReply(call, r);
  OnScriptReply(call, r);
}

void Lane::OnErrorReply(Call* call, Connection& conn, std::string_view err) {
  if (err.rfind("NOSCRIPT", 0) == 0) {
    // Redis restarted or flushed its scripts: send the script itself (which caches it again).
    stats().noscript.fetch_add(1, std::memory_order_relaxed);
    if (call->asking) conn.Send(kAsking, [](const redisReply*, Failure) {});  // still importing
    conn.Send(EncodeEval(*call, internal::kRedisScript), call);
    return;
  }
  if (auto to = ParseRedirect(err, conn.address()); to && call->redirects < kMaxRedirects) {
    ++call->redirects;
    stats().redirects.fetch_add(1, std::memory_order_relaxed);
    if (to->moved) Moved(call->slot, to->node);
    return Dispatch(call, Node(to->node), !to->moved);
  }
  if (IsTryAgain(err)) return RetryWhenMigrating(call);
  stats().errors.fetch_add(1, std::memory_order_relaxed);
  if (url_.sentinel && IsReadOnly(err)) {
    // The master was demoted since its connection was verified (a failover): the script wrote
    // nothing there. Its connection goes, which asks the sentinels again; nothing more is sent
    // to it.
    Finish(call, StoreErrc::kUnavailable, std::string(err));
    return conn.Close("READONLY: no longer the master");
  }
  Finish(call, StoreErrc::kProtocol, std::string(err));
}

// A slot in migration holds some of the call's keys but not all (a script names several):
// Redis asks to try again shortly. Until the deadline, from the slot's owner, each try with its
// own redirects (ASK, then TRYAGAIN again from the importing node); a timeout then is the
// slot's, not a sign that Redis is down (see OnDeadline).
void Lane::RetryWhenMigrating(Call* call) {
  call->migrating = true;
  call->redirects = 0;
  ++call->refs;  // the timer's
  auto timer = std::make_shared<net::steady_timer>(ioc_, milliseconds(1));
  timer->async_wait([this, call, timer](const boost::system::error_code&) {
    if (!call->finished) Dispatch(call, NodeFor(call->slot), false);
    Release(call);
  });
}

// The general path: {now, committed, kValuesPerCheck values per check}.
void Lane::OnScriptReply(Call* call, const redisReply* r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 + kValuesPerCheck * call->n) {
    stats().errors.fetch_add(1, std::memory_order_relaxed);
    return Finish(call, StoreErrc::kProtocol, "unexpected script reply");
  }
  integers_.clear();
  for (size_t i = 0; i < r->elements; ++i) integers_.push_back(r->element[i]->integer);
  Succeed(call, DecodeDecisions(integers_, call->decisions));
}

// The token-bucket path: {now, then the deficit of each check at now}.
void Lane::OnFastReply(Call* call, const redisReply* r) {
  if (!IntegerArray(r, 1 + call->n, integers_)) {
    stats().errors.fetch_add(1, std::memory_order_relaxed);
    return Finish(call, StoreErrc::kProtocol, "unexpected script reply");
  }
  const core::Instant now = core::Instant::FromUnixMicros(integers_[0]);
  Succeed(call,
          DecideTokenBuckets(call->checks, call->consume, now,
                             std::span<const int64_t>(integers_).subspan(1), call->decisions));
}

void Lane::Succeed(Call* call, ApplyResult result) {
  call->finished = true;
  shared_.breaker.RecordSuccess(SteadyClock::now);
  // Finished calls at the head of the deadline queue leave it now (replies come in order, so
  // this is usually this call): the queue holds about the calls in flight, not a timeout's worth.
  while (!deadlines_.empty() && deadlines_.front()->finished) {
    Call* done = deadlines_.front();
    deadlines_.pop_front();
    Release(done);  // `call` itself stays referenced by the reply being handled
  }
  call->done(std::move(result));
}

void Lane::Finish(Call* call, StoreErrc errc, std::string message, bool breaker) {
  call->finished = true;
  if (errc != StoreErrc::kOk && breaker) {
    // The breaker opening on timeouts drops the connections (Connection::Reset).
    if (shared_.breaker.RecordFailure(SteadyClock::now()) && errc == StoreErrc::kTimeout) {
      for (auto& [address, conn] : nodes_) conn->Reset();
    }
  }
  ApplyResult result;
  result.error = errc;
  result.message = std::move(message);
  call->done(std::move(result));
}

// ---------------------------------------------------------------------------------------------
// Plain commands (metering, exports) are not deadline-bound decisions: no breaker, no timer; a
// dead connection fails them at once.

void Lane::Command(std::vector<std::string> args, size_t key_index,
                   std::function<void(core::Result<RedisValue>)> done) {
  const int slot = key_index < args.size() ? HashSlot(args[key_index]) : 0;
  auto cmd = std::make_shared<std::string>();
  AppendCommand(*cmd, args);
  net::post(ioc_, [this, cmd = std::move(cmd), slot, done = std::move(done)]() mutable {
    SendCommand(std::move(cmd), slot, NodeFor(slot), false, 0, std::move(done));
  });
}

void Lane::SendCommand(std::shared_ptr<const std::string> cmd, int slot, Connection& conn,
                       bool asking, int redirects,
                       std::function<void(core::Result<RedisValue>)> done) {
  if (asking) conn.Send(kAsking, [](const redisReply*, Failure) {});
  conn.Send(*cmd, [this, cmd, slot, redirects, from = conn.address(), done = std::move(done)](
                      const redisReply* r, Failure f) mutable {
    if (f != Failure::kNone) return done(core::Error{"redis unavailable"});
    if (r->type == REDIS_REPLY_ERROR && redirects < kMaxRedirects) {
      if (auto to = ParseRedirect(std::string_view(r->str, r->len), from)) {
        stats().redirects.fetch_add(1, std::memory_order_relaxed);
        if (to->moved) Moved(slot, to->node);
        return SendCommand(std::move(cmd), slot, Node(to->node), !to->moved, redirects + 1,
                           std::move(done));
      }
    }
    done(ToValue(r));
  });
}

RedisStore::FireResult Lane::OnFired(int slot, const Connection& conn, const redisReply* r,
                                     Failure f) {
  using FireResult = RedisStore::FireResult;
  FireResult result = FireResult::kFailed;
  if (f == Failure::kNotSent) {
    result = FireResult::kNotRun;
  } else if (f == Failure::kNone && r->type != REDIS_REPLY_ERROR) {
    result = FireResult::kOk;
  } else if (f == Failure::kNone) {
    const std::string_view err(r->str, r->len);
    const auto to = ParseRedirect(err, conn.address());
    if (to && to->moved) Moved(slot, to->node);
    if (to || IsTryAgain(err) || IsReadOnly(err)) result = FireResult::kNotRun;
  }
  if (result != FireResult::kOk) stats().command_errors.fetch_add(1, std::memory_order_relaxed);
  return result;
}

void Lane::FireAndForget(std::vector<RedisStore::Fire> commands) {
  net::post(ioc_, [this, commands = std::move(commands)]() mutable {
    for (RedisStore::Fire& c : commands) {
      Connection& conn = NodeFor(c.slot);
      conn.Send(
          c.command,
          [this, slot = c.slot, &conn, done = std::move(c.done)](const redisReply* r, Failure f) {
            const RedisStore::FireResult result = OnFired(slot, conn, r, f);
            if (done) done(result);
          },
          c.replies);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Nodes and the cluster's slot map.

Connection& Lane::Node(const NodeAddress& address) {
  auto& slot = nodes_[address];
  if (!slot) slot = std::make_unique<Connection>(*this, ioc_, address);
  return *slot;
}

void Lane::CloseNode(const NodeAddress& address, const std::string& why) {
  if (auto it = nodes_.find(address); it != nodes_.end()) it->second->Close(why);
}

Connection& Lane::NodeFor(int slot) {
  if (sentinels_) return sentinels_->MasterNode();
  const NodeAddress* owner = slots_.Owner(slot);
  return Node(owner ? *owner : url_.nodes[0]);
}

void Lane::RefreshTopology() {
  if (sentinels_) return sentinels_->Ask();
  if (refreshing_) return;
  refreshing_ = true;
  AskSlots(std::make_shared<std::vector<NodeAddress>>(TopologyCandidates(url_.nodes, slots_)), 0);
}

void Lane::AskSlots(std::shared_ptr<std::vector<NodeAddress>> candidates, size_t i) {
  if (i == candidates->size()) {  // nobody answered: the map stays as it is, and we ask again soon
    refreshing_ = false;
    refresh_timer_.expires_after(milliseconds(200));
    refresh_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) RefreshTopology();
    });
    return;
  }
  std::string cmd;
  AppendCommand(cmd, {"CLUSTER", "SLOTS"});
  const NodeAddress& asked = (*candidates)[i];
  Node(asked).Send(
      cmd, [this, candidates, next = i + 1, host = asked.host](const redisReply* r, Failure f) {
        std::optional<SlotMap> map;
        if (f == Failure::kNone) map = SlotMap::FromClusterSlots(ToValue(r), host);
        if (!map) return AskSlots(candidates, next);
        refreshing_ = false;
        slots_ = std::move(*map);
      });
}

void Lane::Moved(int slot, const NodeAddress& node) {
  if (!url_.cluster) return;
  slots_.Assign(slot, node);
  RefreshTopology();
}

}  // namespace tollgate::store::redis
