#include <tollgate/store/redis_store.hpp>

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <hiredis/hiredis.h>

#include <tollgate/util/hash.hpp>
#include <tollgate/util/text.hpp>

namespace tollgate::store {
namespace internal {
extern const std::string_view kRedisScript;
}  // namespace internal

namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kSlots = 16384;
constexpr int kMaxRedirects = 5;
constexpr std::string_view kAsking = "*1\r\n$6\r\nASKING\r\n";
constexpr size_t kValuesPerCheck = 8;
// Token-bucket requests waiting for a connection leave together, in batches: one script call per
// group of them that shares a slot (a script's keys must share one on a cluster) and a `now`.
// At most this many batches in flight per connection (so Redis always has the next one queued
// while it runs one), and at most this many requests per batch.
constexpr int kBatchesInFlight = 2;
constexpr size_t kMaxBatch = 128;

struct NodeAddress {
  std::string host;
  std::string port;
  bool operator<(const NodeAddress& o) const { return std::tie(host, port) < std::tie(o.host, o.port); }
  bool operator==(const NodeAddress& o) const = default;
};

struct ParsedUrl {
  bool cluster = false;
  bool tls = false;  // rediss:// and rediss-cluster://
  std::vector<NodeAddress> nodes;
  std::string user;
  std::string password;
  int db = 0;
};

core::Result<NodeAddress> ParseHostPort(std::string_view s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == s.size()) {
    return core::Error{"store.url: expected host:port, got '" + std::string(s) + "'"};
  }
  return NodeAddress{std::string(s.substr(0, colon)), std::string(s.substr(colon + 1))};
}

core::Result<ParsedUrl> ParseUrl(std::string_view url) {
  ParsedUrl out;
  std::string_view rest;
  if (url.rfind("redis://", 0) == 0) {
    rest = url.substr(8);
  } else if (url.rfind("redis-cluster://", 0) == 0) {
    out.cluster = true;
    rest = url.substr(16);
  } else if (url.rfind("rediss://", 0) == 0) {
    out.tls = true;
    rest = url.substr(9);
  } else if (url.rfind("rediss-cluster://", 0) == 0) {
    out.cluster = out.tls = true;
    rest = url.substr(17);
  } else {
    return core::Error{"store.url: must start with redis://, rediss://, redis-cluster:// or rediss-cluster://, got '" +
                       std::string(url) + "'"};
  }
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view cred = rest.substr(0, at);
    const size_t colon = cred.find(':');
    if (colon == std::string_view::npos) {
      out.password = std::string(cred);
    } else {
      out.user = std::string(cred.substr(0, colon));
      out.password = std::string(cred.substr(colon + 1));
    }
    rest = rest.substr(at + 1);
  }
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      const auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), out.db);
      if (ec != std::errc() || p != db.data() + db.size() || out.db < 0) {
        return core::Error{"store.url: bad database number '" + std::string(db) + "'"};
      }
      if (out.cluster && out.db != 0) return core::Error{"store.url: Redis Cluster has only database 0"};
    }
  }
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    auto node = ParseHostPort(rest.substr(0, comma));
    if (!node) return core::Error{node.error()};
    out.nodes.push_back(*node);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (out.nodes.empty()) return core::Error{"store.url: no host"};
  if (!out.cluster && out.nodes.size() > 1) return core::Error{"store.url: one host for redis://"};
  return out;
}

// A cluster redirect in an error reply: "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>"
// (an empty host is the host of the node that answered).
struct Redirect {
  NodeAddress node;
  bool moved = false;
};
std::optional<Redirect> ParseRedirect(std::string_view err, const NodeAddress& from) {
  const bool moved = err.rfind("MOVED ", 0) == 0;
  if (!moved && err.rfind("ASK ", 0) != 0) return std::nullopt;
  auto node = ParseHostPort(err.substr(err.rfind(' ') + 1));
  if (!node) return std::nullopt;
  if (node->host.empty()) node->host = from.host;
  return Redirect{std::move(*node), moved};
}

// The index of `a` in `list`, where it is added if absent.
int IndexOf(std::vector<NodeAddress>& list, const NodeAddress& a) {
  const auto it = std::find(list.begin(), list.end(), a);
  if (it != list.end()) return static_cast<int>(it - list.begin());
  list.push_back(a);
  return static_cast<int>(list.size() - 1);
}

// CRC16-CCITT (XMODEM), as Redis Cluster computes slots; a byte at a time from a table.
constexpr std::array<uint16_t, 256> kCrc16Table = [] {
  std::array<uint16_t, 256> t{};
  for (int b = 0; b < 256; ++b) {
    uint16_t crc = static_cast<uint16_t>(b << 8);
    for (int i = 0; i < 8; ++i) crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021) : static_cast<uint16_t>(crc << 1);
    t[static_cast<size_t>(b)] = crc;
  }
  return t;
}();

uint16_t Crc16(std::string_view s) {
  uint16_t crc = 0;
  for (unsigned char c : s) crc = static_cast<uint16_t>((crc << 8) ^ kCrc16Table[((crc >> 8) ^ c) & 0xff]);
  return crc;
}

// The cluster slot of a key: CRC16 of its hash tag ({...}) when it has one.
int HashSlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return Crc16(key) % kSlots;
}

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

using util::AppendDecimal;

// One bulk string of a RESP request. Decisions are encoded through a StringAppender: the
// string sees one append per buffer-full, not five per argument.
void AppendBulk(util::StringAppender& out, std::string_view a) {
  out << "$" << a.size() << "\r\n" << a << "\r\n";
}
void AppendBulk(util::StringAppender& out, int64_t v) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  AppendBulk(out, std::string_view(buf, static_cast<size_t>(end - buf)));
}
void AppendBulk(std::string& out, std::string_view a) {
  util::StringAppender text(out);
  AppendBulk(text, a);
}

// A whole RESP request.
template <class Args>
void AppendRequest(std::string& out, const Args& args) {
  out += '*';
  AppendDecimal(out, static_cast<int64_t>(args.size()));
  out += "\r\n";
  for (const auto& a : args) AppendBulk(out, std::string_view(a));
}
void AppendCommand(std::string& out, const std::vector<std::string>& args) { AppendRequest(out, args); }

const char* AlgorithmSuffix(core::Algorithm a) {
  switch (a) {
    case core::Algorithm::kTokenBucket: return "tb";
    case core::Algorithm::kSlidingWindowLog: return "log";
    case core::Algorithm::kSlidingWindowCounter: return "swc";
    case core::Algorithm::kFixedWindow: return "fw";
    case core::Algorithm::kQuota: return "q";
  }
  return "x";
}

// The six script arguments of one check (see redis_script.lua).
std::array<int64_t, 3> ScriptParams(const core::Limit& limit) {
  return std::visit(
      [](const auto& impl) -> std::array<int64_t, 3> {
        using T = std::decay_t<decltype(impl)>;
        if constexpr (std::is_same_v<T, core::TokenBucket>) {
          return {impl.capacity(), impl.rate().tokens, impl.rate().per_micros};
        } else if constexpr (std::is_same_v<T, core::SlidingLog>) {
          return {impl.limit(), impl.window().micros(), 0};
        } else if constexpr (std::is_same_v<T, core::SlidingCounter>) {
          return {impl.limit(), impl.window().micros() / 1000, 0};
        } else if constexpr (std::is_same_v<T, core::FixedWindow>) {
          return {impl.limit(), impl.window().micros(), 0};
        } else {
          return {impl.period() == core::Period::kDay ? 0 : 1, impl.allowance().value_or(0),
                  impl.ceiling().value_or(0)};
        }
      },
      limit.impl());
}

// The five arguments of one check on the script's token-bucket path (see redis_script.lua):
// need, refill units per us, key TTL (ms), room, enforced.
std::array<int64_t, 5> TokenBucketParams(const core::Limit& limit, int64_t cost, bool enforced) {
  const auto& tb = std::get<core::TokenBucket>(limit.impl());
  const int64_t unit = tb.rate().per_micros;
  const int64_t full = tb.capacity() * unit;  // < 2^53 (TokenBucket::Create)
  // A cost above the capacity never passes (room < 0) and is never debited: its product with the
  // unit, which could overflow, is not needed.
  const int64_t need = cost > tb.capacity() ? 0 : cost * unit;
  const int64_t room = cost > tb.capacity() ? -1 : full - need;
  // The key lives as long as an empty bucket takes to refill (the policy's window, C/r): at least
  // as long as any deficit it can hold, so an expired key is always a full bucket.
  const int64_t refill_us = (full + tb.rate().tokens - 1) / tb.rate().tokens;
  const int64_t ttl_ms = std::max<int64_t>(1, (refill_us + 999) / 1000);
  return {need, tb.rate().tokens, ttl_ms, room, enforced ? 1 : 0};
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// kNotSent: the connection failed before the command was written (connecting, or waiting out
// its reconnect backoff), so Redis certainly did not run it; kConnection: it may have.
enum class Failure { kNone, kConnection, kTimeout, kProtocol, kNotSent };

}  // namespace

// ---------------------------------------------------------------------------------------------

namespace {

// One decision in flight. Pooled by the store and reused (with its buffer), so a decision
// allocates nothing in the steady state. Owned by the I/O thread once submitted; it lives while
// anything refers to it: the deadline queue and each command sent for it whose reply is to come.
struct Call {
  std::string command;   // EVALSHA <sha> <numkeys> <keys...> <args...>, RESP-encoded
  size_t header_len = 0; // "*<n>\r\n$7\r\nEVALSHA\r\n$40\r\n<sha>\r\n": replaced for EVAL
  size_t args = 0;       // element count of the request
  // Where a group's call (Impl::EncodeGroup) finds this request's pieces in `command`: its keys
  // [keys_begin, keys_end) and its per-check arguments [params_begin, end).
  size_t keys_begin = 0;
  size_t keys_end = 0;
  size_t params_begin = 0;
  int64_t now_us = 0;    // the `now` argument; 0 = Redis TIME. A group shares one.
  Call* next = nullptr;  // the next request of the same group
  size_t shape = 0;      // EncodeGroup: the index of its arguments among the group's shapes
  bool same_keys = false;  // EncodeGroup: its keys are the previous request's (sent once)
  std::span<core::Decision> decisions;
  std::span<const Check> checks;  // valid until `done` runs (Store::Apply's contract)
  Store::Completion done;
  SteadyClock::time_point deadline;
  size_t n = 0;
  int slot = 0;
  int redirects = 0;
  int refs = 0;
  bool fast = false;     // the token-bucket path of the script; such calls are grouped
  bool consume = false;
  bool finished = false;
  bool asking = false;     // sent after ASK: the node is importing its slot
  bool migrating = false;  // answered TRYAGAIN: its slot is moving between nodes
};

}  // namespace

// One connection to one node. Not thread-safe: used on the store's I/O thread only.
class Connection {
 public:
  using ReplyFn = std::function<void(const redisReply*, Failure)>;

  Connection(RedisStore::Impl& store, net::io_context& ioc, NodeAddress address)
      : store_(store), ioc_(ioc), address_(std::move(address)), socket_(ioc), timer_(ioc) {}
  ~Connection() {
    if (reader_) redisReaderFree(reader_);
  }

  // Queues `command` (RESP-encoded). Everything queued in one turn of the event loop leaves in
  // one write. Its reply goes to `fn`, or for a decision to the store (Impl::OnReply).
  // `command` may hold several requests: `fn` then gets each of their `replies`.
  void Send(std::string_view command, ReplyFn fn, size_t replies = 1);
  void Send(std::string_view command, Call* call);
  // A token-bucket request: waits to leave in the next batch (kBatchesInFlight).
  void SendGrouped(Call* call);
  const NodeAddress& address() const { return address_; }
  // Drops the connection (its pending commands fail); the next command reconnects. Used when the
  // breaker opens on timeouts: a connection that died without closing would otherwise be
  // probed until the kernel gives up on it. One still connecting has its own deadline
  // (connect_timeout_ms), which a slow handshake may need.
  void Reset() {
    if (state_ == State::kReady) Fail("reset");
  }
  bool Idle() const { return pending_.empty() && out_.empty() && grouped_.empty() && !write_in_flight_; }

 private:
  enum class State { kIdle, kConnecting, kReady, kBackoff };
  // A reply to come: a decision (call), a group of them (the first call, `group` of them, linked
  // by Call::next; a group of one is sent as a plain call), or any other command (fn).
  struct Pending {
    Call* call = nullptr;
    size_t group = 0;
    ReplyFn fn;
    bool ends_batch = false;  // the last reply of a batch of groups (SendGroups)
  };
  bool Usable();  // false: in backoff, fail at once
  bool Queue(std::string_view command);
  void Wake();    // connects, or schedules a write of what is queued
  void SendGroups();
  // The next waiting request; drops those that timed out while they waited (they were answered
  // already).
  Call* PopWaiting();
  void Deliver(Pending& p, const redisReply* r, Failure f);
  void Connect();
  void Ready();  // connected (and, with TLS, through the handshake)
  tcp::socket& Socket() { return tls_ ? tls_->next_layer() : socket_; }
  // Calls fn(stream): the TLS stream, or the socket itself.
  template <class Fn>
  void OnStream(Fn&& fn) {
    if (tls_) {
      fn(*tls_);
    } else {
      fn(socket_);
    }
  }
  void ScheduleFlush();
  void Flush();
  void Read();
  void Fail(const std::string& why);

  RedisStore::Impl& store_;
  net::io_context& ioc_;
  NodeAddress address_;
  tcp::socket socket_;  // without TLS
  // With TLS, the stream of the current connection, which owns its socket. Each operation holds
  // it, so the stream of a failed connection lives until its operations have returned.
  std::shared_ptr<net::ssl::stream<tcp::socket>> tls_;
  net::steady_timer timer_;
  State state_ = State::kIdle;
  redisReader* reader_ = nullptr;
  std::string out_;
  std::string writing_;
  bool write_in_flight_ = false;
  bool flush_scheduled_ = false;
  std::deque<Pending> pending_;  // in the order of the replies to come
  std::deque<Call*> grouped_;    // token-bucket requests waiting for the next group
  int batches_in_flight_ = 0;
  std::array<char, 16 * 1024> read_buf_;
  SteadyClock::time_point retry_at_;
  SteadyClock::time_point failed_at_;
  int backoff_ms_ = 0;
  uint64_t epoch_ = 0;  // bumps on every failure: stale handlers see a different epoch
};

// What the store's lanes share: statistics, and one circuit breaker (any lane's failures open
// it for all, any lane's success closes it).
struct RedisStore::Shared {
  RedisStoreStats stats;
  std::unique_ptr<net::ssl::context> tls;  // rediss:// and rediss-cluster:// only
  std::mutex error_mu;
  std::string last_error;  // why the last connection failed, for the logs
  std::atomic<int> consecutive_failures{0};
  std::atomic<int64_t> open_until_ns{0};  // steady clock
  // Steady clock: the last success after failures. A lane whose connection waits out its
  // reconnect backoff reconnects at once when another lane has seen Redis answer since.
  std::atomic<int64_t> recovered_ns{0};
};

// One event loop's share of the store: its connections (one per node), pipeline, deadlines,
// slot map. The store's own lane runs on a thread of its own; a lane on a
// caller's event loop (RedisStore::AddLane) runs on that loop's thread.
class RedisStore::Impl {
 public:
  Impl(RedisStoreOptions options, ParsedUrl url, Shared& shared, net::io_context* loop)
      : stats(shared.stats),
        shared_(shared),
        options_(std::move(options)),
        url_(std::move(url)),
        sha_(Sha1Hex(internal::kRedisScript)),
        own_ioc_(loop ? nullptr : std::make_unique<net::io_context>(1)),
        ioc_(loop ? *loop : *own_ioc_) {
    slots_.fill(-1);
    if (own_ioc_) {
      thread_ = std::thread([this] {
        auto guard = net::make_work_guard(ioc_);
        ioc_.run();
      });
    }
    if (url_.cluster) net::post(ioc_, [this] { RefreshTopology(); });
  }
  ~Impl() {
    if (!own_ioc_) return;  // a caller's loop: stopped by its owner before this
    Drain(milliseconds(1000));
    ioc_.stop();
    thread_.join();
  }

  // Waits (bounded) until every command sent so far has its reply: writes such as usage
  // counts are not lost when the process stops.
  void Drain(milliseconds limit) {
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

  void Apply(const Batch& batch, std::span<core::Decision> decisions, Completion done);
  void Command(std::vector<std::string> args, size_t key_index,
               std::function<void(core::Result<RedisValue>)> done);
  void FireAndForget(std::vector<Fire> commands);
  // The outcome of a FireAndForget command's reply; learns the new owner of a slot from MOVED.
  FireResult OnFired(int slot, const Connection& conn, const redisReply* r, Failure f);

  const RedisStoreOptions& options() const { return options_; }
  const ParsedUrl& url() const { return url_; }
  net::ssl::context* tls_context() const { return shared_.tls.get(); }
  void NoteFailure(std::string why) {
    std::lock_guard lock(shared_.error_mu);
    shared_.last_error = std::move(why);
  }
  RedisStoreStats& stats;  // the store's, shared by its lanes

 private:
  friend class Connection;
  Call* Acquire();
  void Release(Call* call);
  void StartSubmitted();
  void Start(Call* call, SteadyClock::time_point now);
  void Dispatch(Call* call, Connection& conn, bool asking);
  // Takes over the reference of the command answered.
  void OnReply(Call* call, Connection& conn, const redisReply* reply, Failure f);
  void OnDeadline();
  // `breaker`: the failure counts toward opening the circuit breaker.
  void Finish(Call* call, StoreErrc errc, std::string message, bool breaker = true);
  void Succeed(Call* call, ApplyResult result);
  void OnFastReply(Call* call, const redisReply* r);
  // The deficits of the call's checks at `now` (the token-bucket path's answer) -> decisions.
  void DecideFast(Call* call, core::Instant now, redisReply* const* deficits);
  // A group's reply: split into its calls; takes over the reference of each.
  void OnGroupReply(Call* first, Connection& conn, const redisReply* reply, Failure f);
  void EncodeGroup(std::string& out, Call* first);
  Connection& NodeFor(int slot);
  Connection& Node(const NodeAddress& address);
  // Asks the cluster for its slot map: each node we know in turn (the seeds, then the masters of
  // the current map) until one answers; if none does, again after a pause. At start, after a
  // MOVED, and after a connection to a node failed: a failover moves that node's slots to a
  // replica, and nobody answers MOVED to a client that cannot reach the old master.
  void RefreshTopology();
  void AskSlots(std::shared_ptr<std::vector<NodeAddress>> candidates, size_t i);
  // A MOVED reply: `slot` is `node`'s now, and the rest of the map may have changed too.
  void Moved(int slot, const NodeAddress& node);
  // Command(): sends `cmd` to `conn` and follows redirects.
  void SendCommand(std::shared_ptr<const std::string> cmd, int slot, Connection& conn, bool asking,
                   int redirects, std::function<void(core::Result<RedisValue>)> done);

  Shared& shared_;  // the circuit breaker
  RedisStoreOptions options_;
  ParsedUrl url_;
  const std::string sha_;
  std::unique_ptr<net::io_context> own_ioc_;  // the store's own lane only
  net::io_context& ioc_;
  std::thread thread_;
  std::map<NodeAddress, std::unique_ptr<Connection>> nodes_;
  std::vector<NodeAddress> node_list_;  // index -> address, for slots_
  std::array<int, kSlots> slots_;
  bool refreshing_ = false;
  net::steady_timer refresh_timer_{ioc_};

  // Calls: submitted by any thread under mu_, started on the I/O thread in batches, so that one
  // wake-up of the I/O thread carries every decision issued meanwhile.
  std::mutex mu_;
  std::vector<Call*> submitted_;      // guarded by mu_
  std::vector<Call*> free_;           // guarded by mu_
  bool start_posted_ = false;         // guarded by mu_
  std::vector<std::unique_ptr<Call>> pool_;  // guarded by mu_; every call ever made
  std::vector<Call*> released_;       // I/O thread: back to free_ at the next batch
  std::vector<Call*> starting_;       // I/O thread: the batch being started
  // Deadlines: the timeout is the same for every call, so calls expire in the order they
  // started: one queue and one timer instead of a timer per call.
  std::deque<Call*> deadlines_;
  net::steady_timer deadline_timer_{ioc_};
  bool deadline_armed_ = false;
  std::vector<std::string_view> shapes_;  // EncodeGroup's scratch
  std::vector<uint64_t> key_hashes_;      // EncodeGroup's scratch
  // Connection::SendGroups's scratch: the groups of a batch, and each slot's open group (-1:
  // none; one entry without a cluster, where every call has slot 0).
  struct Group {
    Call* first;
    Call* last;
    size_t count;
  };
  std::vector<Group> groups_;
  std::vector<int> group_of_slot_ = std::vector<int>(url_.cluster ? kSlots : 1, -1);
};

// ---------------------------------------------------------------------------------------------

bool Connection::Usable() {
  if (state_ == State::kBackoff) {
    const bool recovered_since =
        store_.shared_.recovered_ns.load(std::memory_order_relaxed) > failed_at_.time_since_epoch().count();
    if (SteadyClock::now() < retry_at_ && !recovered_since) return false;
    state_ = State::kIdle;
  }
  return true;
}

bool Connection::Queue(std::string_view command) {
  if (!Usable()) return false;
  out_.append(command);
  return true;
}

void Connection::Send(std::string_view command, ReplyFn fn, size_t replies) {
  if (!Queue(command)) {
    for (size_t i = 0; i < replies; ++i) fn(nullptr, Failure::kNotSent);
    return;
  }
  for (size_t i = 1; i < replies; ++i) pending_.push_back(Pending{nullptr, 0, fn});
  pending_.push_back(Pending{nullptr, 0, std::move(fn)});
  Wake();
}

void Connection::Send(std::string_view command, Call* call) {
  ++call->refs;
  if (!Queue(command)) return store_.OnReply(call, *this, nullptr, Failure::kConnection);
  pending_.push_back(Pending{call, 0, nullptr});
  Wake();
}

void Connection::SendGrouped(Call* call) {
  ++call->refs;
  if (!Usable()) return store_.OnReply(call, *this, nullptr, Failure::kConnection);
  grouped_.push_back(call);
  Wake();
}

void Connection::Wake() {
  if (state_ == State::kIdle) Connect();
  if (state_ == State::kReady) ScheduleFlush();
}

Call* Connection::PopWaiting() {
  while (!grouped_.empty() && grouped_.front()->finished) {
    store_.Release(grouped_.front());
    grouped_.pop_front();
  }
  if (grouped_.empty()) return nullptr;
  Call* next = grouped_.front();
  grouped_.pop_front();
  return next;
}

// Sends the waiting token-bucket requests in batches, while fewer than kBatchesInFlight are out.
// A batch is a script call per group: the requests of one slot and one `now`, in their order (a
// key's requests share its slot, so they stay in order); a request whose slot's group has
// another `now` starts a new one.
void Connection::SendGroups() {
  std::vector<RedisStore::Impl::Group>& groups = store_.groups_;
  std::vector<int>& group_of_slot = store_.group_of_slot_;
  while (batches_in_flight_ < kBatchesInFlight) {
    groups.clear();
    Call* c;
    for (size_t taken = 0; taken < kMaxBatch && (c = PopWaiting()) != nullptr; ++taken) {
      c->next = nullptr;
      int& index = group_of_slot[static_cast<size_t>(c->slot)];
      if (index >= 0) {
        auto& g = groups[static_cast<size_t>(index)];
        if (g.first->now_us == c->now_us) {
          g.last = g.last->next = c;
          ++g.count;
          continue;
        }
      }
      index = static_cast<int>(groups.size());
      groups.push_back({c, c, 1});
    }
    if (groups.empty()) return;
    for (const auto& g : groups) {
      group_of_slot[static_cast<size_t>(g.first->slot)] = -1;
      if (g.count == 1) {
        out_.append(g.first->command);
      } else {
        store_.EncodeGroup(out_, g.first);
      }
      pending_.push_back(Pending{g.first, g.count, nullptr});
    }
    pending_.back().ends_batch = true;
    ++batches_in_flight_;
    store_.stats.scripts.fetch_add(groups.size(), std::memory_order_relaxed);
  }
}

void Connection::Deliver(Pending& p, const redisReply* r, Failure f) {
  if (p.group > 1) {
    store_.OnGroupReply(p.call, *this, r, f);
  } else if (p.call) {
    store_.OnReply(p.call, *this, r, f);
  } else {
    p.fn(r, f);
  }
}

void Connection::Connect() {
  state_ = State::kConnecting;
  const uint64_t epoch = epoch_;
  if (reader_) redisReaderFree(reader_);
  reader_ = redisReaderCreate();
  // The handshake goes first, ahead of what was queued while connecting.
  std::string hello;
  std::deque<Pending> hello_fns;
  auto check = [this](const char* what) {
    return Pending{nullptr, 0, [this, what](const redisReply* r, Failure f) {
      if (f == Failure::kNone && r->type == REDIS_REPLY_ERROR) {
        Fail(std::string(what) + " failed: " + std::string(r->str, r->len));
      }
    }};
  };
  const ParsedUrl& url = store_.url();
  if (!url.password.empty()) {
    if (url.user.empty()) {
      AppendCommand(hello, {"AUTH", url.password});
    } else {
      AppendCommand(hello, {"AUTH", url.user, url.password});
    }
    hello_fns.push_back(check("AUTH"));
  }
  if (url.db != 0) {
    AppendCommand(hello, {"SELECT", std::to_string(url.db)});
    hello_fns.push_back(check("SELECT"));
  }
  // Load the script up front, so the first decisions after a (re)connect find it instead of
  // each paying a NOSCRIPT round trip. A failure here is not fatal: NOSCRIPT still recovers.
  AppendCommand(hello, {"SCRIPT", "LOAD", std::string(internal::kRedisScript)});
  hello_fns.push_back(Pending{nullptr, 0, [](const redisReply*, Failure) {}});
  out_.insert(0, hello);
  for (auto it = hello_fns.rbegin(); it != hello_fns.rend(); ++it) pending_.push_front(std::move(*it));

  if (net::ssl::context* context = store_.tls_context()) {
    tls_ = std::make_shared<net::ssl::stream<tcp::socket>>(ioc_, *context);
    boost::system::error_code not_ip;
    net::ip::make_address(address_.host, not_ip);
    if (not_ip) SSL_set_tlsext_host_name(tls_->native_handle(), address_.host.c_str());  // SNI
    tls_->set_verify_callback(net::ssl::host_name_verification(address_.host));
  }
  auto resolver = std::make_shared<tcp::resolver>(ioc_);
  timer_.expires_after(milliseconds(store_.options().connect_timeout_ms));
  timer_.async_wait([this, epoch](const boost::system::error_code& ec) {
    if (!ec && epoch == epoch_ && state_ == State::kConnecting) Fail("connect timeout");
  });
  resolver->async_resolve(address_.host, address_.port,
      [this, epoch, resolver](const boost::system::error_code& ec, tcp::resolver::results_type results) {
        if (epoch != epoch_) return;
        if (ec) return Fail("resolve: " + ec.message());
        net::async_connect(Socket(), results, [this, epoch, tls = tls_](const boost::system::error_code& cec,
                                                                        const tcp::endpoint&) {
          if (epoch != epoch_) return;
          if (cec) return Fail("connect: " + cec.message());
          Socket().set_option(tcp::no_delay(true));
          if (!tls) return Ready();
          tls->async_handshake(net::ssl::stream_base::client, [this, epoch, tls](const boost::system::error_code& hec) {
            if (epoch != epoch_) return;
            if (hec) return Fail("TLS handshake: " + hec.message());
            Ready();
          });
        });
      });
}

void Connection::Ready() {
  timer_.cancel();
  state_ = State::kReady;
  Read();
  Flush();
}

void Connection::ScheduleFlush() {
  if (flush_scheduled_ || write_in_flight_) return;
  flush_scheduled_ = true;
  // Runs after the handlers already queued: their commands join this write.
  net::post(ioc_, [this, epoch = epoch_] {
    if (epoch != epoch_) return;
    flush_scheduled_ = false;
    Flush();
  });
}

void Connection::Flush() {
  if (state_ != State::kReady) return;
  SendGroups();
  if (write_in_flight_ || out_.empty()) return;
  writing_.clear();
  writing_.swap(out_);
  write_in_flight_ = true;
  auto written = [this, epoch = epoch_, tls = tls_](const boost::system::error_code& ec, size_t) {
    if (epoch != epoch_) return;
    write_in_flight_ = false;
    if (ec) return Fail("write: " + ec.message());
    Flush();
  };
  OnStream([&](auto& stream) { net::async_write(stream, net::buffer(writing_), std::move(written)); });
}

void Connection::Read() {
  auto got = [this, epoch = epoch_, tls = tls_](const boost::system::error_code& ec, size_t n) {
    if (epoch != epoch_) return;
    if (ec) return Fail("read: " + ec.message());
    if (redisReaderFeed(reader_, read_buf_.data(), n) != REDIS_OK) return Fail("bad reply stream");
    for (;;) {
      void* raw = nullptr;
      if (redisReaderGetReply(reader_, &raw) != REDIS_OK) return Fail("bad reply");
      if (!raw) break;
      ReplyPtr reply(static_cast<redisReply*>(raw));
      if (pending_.empty()) return Fail("unexpected reply");
      Pending p = std::move(pending_.front());
      pending_.pop_front();
      if (p.ends_batch) --batches_in_flight_;
      Deliver(p, reply.get(), Failure::kNone);
      if (epoch != epoch_) return;  // the reply's handler failed the connection
    }
    backoff_ms_ = 0;  // answered, past the handshake (a refused AUTH keeps backing off)
    if (!grouped_.empty()) ScheduleFlush();  // the next group: everything that waited meanwhile
    Read();
  };
  OnStream([&](auto& stream) { stream.async_read_some(net::buffer(read_buf_), std::move(got)); });
}

void Connection::Fail(const std::string& why) {
  const bool nothing_written = state_ == State::kConnecting;
  ++epoch_;
  boost::system::error_code ignored;
  Socket().close(ignored);
  tls_.reset();  // the next connection makes a new stream
  timer_.cancel();
  state_ = State::kBackoff;
  backoff_ms_ = backoff_ms_ == 0 ? 50 : std::min(backoff_ms_ * 2, 2000);
  failed_at_ = SteadyClock::now();
  retry_at_ = failed_at_ + milliseconds(backoff_ms_);
  out_.clear();
  write_in_flight_ = false;
  flush_scheduled_ = false;
  store_.stats.reconnects.fetch_add(1, std::memory_order_relaxed);
  batches_in_flight_ = 0;
  std::deque<Pending> failed;
  failed.swap(pending_);
  for (Call* call : grouped_) failed.push_back(Pending{call, 1, nullptr});
  grouped_.clear();
  store_.NoteFailure(address_.host + ":" + address_.port + ": " + why);
  for (auto& p : failed) Deliver(p, nullptr, nothing_written ? Failure::kNotSent : Failure::kConnection);
  if (store_.url().cluster) store_.RefreshTopology();
}

// ---------------------------------------------------------------------------------------------

Connection& RedisStore::Impl::Node(const NodeAddress& address) {
  auto& slot = nodes_[address];
  if (!slot) slot = std::make_unique<Connection>(*this, ioc_, address);
  return *slot;
}

Connection& RedisStore::Impl::NodeFor(int slot) {
  const int index = slots_[static_cast<size_t>(slot)];
  if (index >= 0) return Node(node_list_[static_cast<size_t>(index)]);
  return Node(url_.nodes[0]);
}

void RedisStore::Impl::RefreshTopology() {
  if (refreshing_) return;
  refreshing_ = true;
  auto candidates = std::make_shared<std::vector<NodeAddress>>(url_.nodes);
  for (const NodeAddress& a : node_list_) {
    if (std::find(candidates->begin(), candidates->end(), a) == candidates->end()) candidates->push_back(a);
  }
  AskSlots(std::move(candidates), 0);
}

void RedisStore::Impl::AskSlots(std::shared_ptr<std::vector<NodeAddress>> candidates, size_t i) {
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
  Node(asked).Send(cmd, [this, candidates, next = i + 1, host = asked.host](const redisReply* r, Failure f) {
    if (f != Failure::kNone || r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
      return AskSlots(candidates, next);
    }
    refreshing_ = false;
    std::array<int, kSlots> slots;
    slots.fill(-1);
    std::vector<NodeAddress> list;
    for (size_t e = 0; e < r->elements; ++e) {
      const redisReply* range = r->element[e];
      if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
      const redisReply* master = range->element[2];
      if (master->type != REDIS_REPLY_ARRAY || master->elements < 2) continue;
      NodeAddress a{std::string(master->element[0]->str, master->element[0]->len),
                    std::to_string(master->element[1]->integer)};
      if (a.host.empty()) a.host = host;  // "the node you asked"
      const int index = IndexOf(list, a);
      for (long long s = range->element[0]->integer; s <= range->element[1]->integer && s < kSlots; ++s) {
        slots[static_cast<size_t>(s)] = index;
      }
    }
    node_list_ = std::move(list);
    slots_ = slots;
  });
}

void RedisStore::Impl::Moved(int slot, const NodeAddress& node) {
  if (!url_.cluster) return;
  slots_[static_cast<size_t>(slot)] = IndexOf(node_list_, node);
  RefreshTopology();
}

// REQUIRES: mu_ held.
Call* RedisStore::Impl::Acquire() {
  if (free_.empty()) {
    pool_.push_back(std::make_unique<Call>());
    return pool_.back().get();
  }
  Call* call = free_.back();
  free_.pop_back();
  return call;
}

// I/O thread. Calls go back to the pool in batches (StartSubmitted), without a lock each.
void RedisStore::Impl::Release(Call* call) {
  if (--call->refs > 0) return;
  call->done = nullptr;  // drops what the completion captured, now
  released_.push_back(call);
}

void RedisStore::Impl::Apply(const Batch& batch, std::span<core::Decision> decisions, Completion done) {
  // The request is encoded here, on the caller's thread, into a pooled buffer.
  Call* call;
  {
    std::lock_guard lock(mu_);
    call = Acquire();
  }
  call->n = batch.checks.size();
  call->decisions = decisions;
  call->checks = batch.checks;
  call->done = std::move(done);
  call->consume = batch.mode == Mode::kConsume;
  call->fast = call->n > 0 && std::all_of(batch.checks.begin(), batch.checks.end(), [](const Check& c) {
    return c.limit->algorithm() == core::Algorithm::kTokenBucket;
  });
  call->redirects = 0;
  call->finished = false;
  call->asking = call->migrating = false;
  call->refs = 1;  // the submission's; then the deadline queue's
  std::string& cmd = call->command;
  cmd.clear();
  call->args = 3 + call->n + 2 + (call->fast ? 5 : 6) * call->n;
  size_t first_key = 0;
  size_t first_key_len = 0;
  {
    util::StringAppender text(cmd);
    text << "*" << call->args << "\r\n";
    AppendBulk(text, "EVALSHA");
    AppendBulk(text, sha_);
    call->header_len = text.size();
    AppendBulk(text, static_cast<int64_t>(call->n));
    call->keys_begin = text.size();
    for (const Check& c : batch.checks) {
      const char* suffix = AlgorithmSuffix(c.limit->algorithm());
      const size_t len = options_.prefix.size() + 2 + batch.scope.size() + 2 + c.name.size() + 1 +
                         std::char_traits<char>::length(suffix);
      text << "$" << len << "\r\n";
      if (first_key == 0) {
        first_key = text.size();
        first_key_len = len;
      }
      text << options_.prefix << ":{" << batch.scope << "}:" << c.name << ":" << suffix << "\r\n";
    }
    call->keys_end = text.size();
    call->now_us = batch.now ? batch.now->unix_micros() : 0;
    AppendBulk(text, call->now_us);
    if (call->fast) {
      AppendBulk(text, call->consume ? "B" : "b");
      call->params_begin = text.size();
      for (const Check& c : batch.checks) {
        for (int64_t v : TokenBucketParams(*c.limit, c.cost, c.enforced)) AppendBulk(text, v);
      }
    } else {
      AppendBulk(text, call->consume ? "1" : "0");
      for (const Check& c : batch.checks) {
        AppendBulk(text, static_cast<int64_t>(c.limit->algorithm()));
        AppendBulk(text, c.cost);
        AppendBulk(text, c.enforced ? "1" : "0");
        for (int64_t p : ScriptParams(*c.limit)) AppendBulk(text, p);
      }
    }
  }
  call->slot = call->n > 0 && url_.cluster
                   ? HashSlot(std::string_view(cmd).substr(first_key, first_key_len))
                   : 0;
  stats.calls.fetch_add(1, std::memory_order_relaxed);
  bool post = false;
  {
    std::lock_guard lock(mu_);
    submitted_.push_back(call);
    post = !start_posted_;
    start_posted_ = true;
  }
  if (post) net::post(ioc_, [this] { StartSubmitted(); });
}

void RedisStore::Impl::StartSubmitted() {
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

void RedisStore::Impl::Start(Call* call, SteadyClock::time_point now) {
  if (shared_.consecutive_failures.load(std::memory_order_relaxed) >= options_.breaker_failures) {
    // Open. Once its time is up, one call probes: the one that moves the time on by another
    // breaker_open_ms (lanes race for it); the others still fail at once. A success closes the
    // circuit (Succeed), a failure opens it again (Finish).
    const int64_t now_ns = now.time_since_epoch().count();
    int64_t until = shared_.open_until_ns.load(std::memory_order_relaxed);
    const int64_t next = now_ns + std::chrono::nanoseconds(milliseconds(options_.breaker_open_ms)).count();
    if (now_ns < until || !shared_.open_until_ns.compare_exchange_strong(until, next, std::memory_order_relaxed)) {
      stats.breaker_rejections.fetch_add(1, std::memory_order_relaxed);
      Finish(call, StoreErrc::kUnavailable, "circuit open", false);
      return Release(call);
    }
  }
  call->deadline = now + milliseconds(options_.timeout_ms);
  deadlines_.push_back(call);  // takes over the submission's reference
  if (!deadline_armed_) {
    deadline_armed_ = true;
    deadline_timer_.expires_at(call->deadline);
    deadline_timer_.async_wait([this](const boost::system::error_code&) { OnDeadline(); });
  }
  Dispatch(call, NodeFor(call->slot), false);
}

// Times out the calls whose deadline passed, drops the finished ones, and waits for the next.
void RedisStore::Impl::OnDeadline() {
  deadline_armed_ = false;
  const auto now = SteadyClock::now();
  while (!deadlines_.empty() && (deadlines_.front()->finished || deadlines_.front()->deadline <= now)) {
    Call* call = deadlines_.front();
    deadlines_.pop_front();
    if (!call->finished && call->migrating) {  // Redis answers; one slot is moving
      Finish(call, StoreErrc::kUnavailable, "deadline exceeded: slot migrating (TRYAGAIN)", false);
    } else if (!call->finished) {
      stats.timeouts.fetch_add(1, std::memory_order_relaxed);
      Finish(call, StoreErrc::kTimeout, "deadline exceeded");
    }
    Release(call);
  }
  if (!deadlines_.empty() && !deadline_armed_) {
    deadline_armed_ = true;
    deadline_timer_.expires_at(deadlines_.front()->deadline);
    deadline_timer_.async_wait([this](const boost::system::error_code&) { OnDeadline(); });
  }
}

void RedisStore::Impl::Dispatch(Call* call, Connection& conn, bool asking) {
  call->asking = asking;
  if (asking) {
    conn.Send(kAsking, [](const redisReply*, Failure) {});
  } else if (call->fast) {
    return conn.SendGrouped(call);
  }
  stats.scripts.fetch_add(1, std::memory_order_relaxed);
  conn.Send(call->command, call);
}

namespace {

// Adds the hash of each of `keys`, RESP-encoded ("$<len>\r\n<key>\r\n"), to `out`.
void HashKeys(std::string_view keys, std::vector<uint64_t>& out) {
  while (keys.size() > 1) {
    size_t len = 0;
    const char* digits = std::from_chars(keys.data() + 1, keys.data() + keys.size(), len).ptr;
    const size_t begin = static_cast<size_t>(digits - keys.data()) + 2;
    out.push_back(util::Hash64(keys.substr(begin, len)));
    keys.remove_prefix(std::min(keys.size(), begin + len + 2));
  }
}

}  // namespace

// One script call deciding every request of a group in turn (the script's 'M' path, or 'U' when
// no key is named twice): each request's keys; each distinct shape (a request's check count and
// per-check arguments, taken from its own call) once; then per request its shape and mode.
void RedisStore::Impl::EncodeGroup(std::string& out, Call* first) {
  shapes_.clear();
  key_hashes_.clear();
  bool unique = true;
  size_t keys = 0;
  size_t requests = 0;
  size_t shape_args = 0;
  const Call* previous = nullptr;
  auto keys_of = [](const Call* c) {
    return std::string_view(c->command).substr(c->keys_begin, c->keys_end - c->keys_begin);
  };
  for (Call* c = first; c; previous = c, c = c->next) {
    // One busy key's requests often follow one another: its keys go once.
    c->same_keys = previous && keys_of(c) == keys_of(previous);
    if (!c->same_keys) keys += c->n;
    unique = unique && !c->same_keys;
    if (unique) HashKeys(keys_of(c), key_hashes_);
    ++requests;
    const std::string_view params = std::string_view(c->command).substr(c->params_begin);
    const auto it = std::find(shapes_.begin(), shapes_.end(), params);
    c->shape = static_cast<size_t>(it - shapes_.begin());
    if (it == shapes_.end()) {
      shapes_.push_back(params);
      shape_args += 1 + 5 * c->n;
    }
  }
  if (unique) {  // two keys of one hash count as the same
    std::sort(key_hashes_.begin(), key_hashes_.end());
    unique = std::adjacent_find(key_hashes_.begin(), key_hashes_.end()) == key_hashes_.end();
  }
  util::StringAppender text(out);
  text << "*" << 3 + keys + 3 + shape_args + requests << "\r\n";
  AppendBulk(text, "EVALSHA");
  AppendBulk(text, sha_);
  AppendBulk(text, static_cast<int64_t>(keys));
  for (const Call* c = first; c; c = c->next) {
    if (!c->same_keys) text << keys_of(c);
  }
  AppendBulk(text, first->now_us);
  AppendBulk(text, unique ? "U" : "M");
  AppendBulk(text, static_cast<int64_t>(shapes_.size()));
  size_t next_shape = 0;
  for (const Call* c = first; c; c = c->next) {
    if (c->shape != next_shape) continue;  // first seen here: its shape goes out now
    AppendBulk(text, static_cast<int64_t>(c->n));
    text << shapes_[next_shape];
    ++next_shape;
  }
  for (const Call* c = first; c; c = c->next) {
    AppendBulk(text, static_cast<int64_t>(4 * (c->shape + 1) + (c->same_keys ? 2 : 0) +
                                          (c->consume ? 1 : 0)));
  }
}

void RedisStore::Impl::OnGroupReply(Call* first, Connection& conn, const redisReply* r, Failure f) {
  if (f != Failure::kNone || r->type != REDIS_REPLY_ARRAY) {
    // Nothing was decided (a failure, NOSCRIPT, a redirect): each call goes on as if it had
    // been sent alone and answered so (a redirect or NOSCRIPT sends it again).
    for (Call* c = first; c;) {
      Call* next = c->next;
      OnReply(c, conn, r, f);
      c = next;
    }
    return;
  }
  size_t expected = 1;
  for (const Call* c = first; c; c = c->next) expected += c->n;
  bool valid = r->elements == expected;
  for (size_t i = 0; valid && i < r->elements; ++i) valid = r->element[i]->type == REDIS_REPLY_INTEGER;
  const core::Instant now = core::Instant::FromUnixMicros(valid ? static_cast<int64_t>(r->element[0]->integer) : 0);
  size_t at = 1;
  for (Call* c = first; c;) {
    Call* next = c->next;
    if (!c->finished) {
      if (valid) {
        DecideFast(c, now, r->element + at);
      } else {
        stats.errors.fetch_add(1, std::memory_order_relaxed);
        Finish(c, StoreErrc::kProtocol, "unexpected script reply");
      }
    }
    at += c->n;
    Release(c);
    c = next;
  }
}

void RedisStore::Impl::OnReply(Call* call, Connection& conn, const redisReply* r, Failure f) {
  struct Unref {  // the reference of the command answered, dropped on every way out
    Impl& impl;
    Call* call;
    ~Unref() { impl.Release(call); }
  } unref{*this, call};
  if (call->finished) return;
  if (f != Failure::kNone) {
    stats.errors.fetch_add(1, std::memory_order_relaxed);
    return Finish(call, StoreErrc::kUnavailable, "connection to " + conn.address().host + ":" + conn.address().port + " failed");
  }
  if (r->type == REDIS_REPLY_ERROR) {
    const std::string_view err(r->str, r->len);
    if (err.rfind("NOSCRIPT", 0) == 0) {
      // Redis restarted or flushed its scripts: send the script itself (which caches it again).
      stats.noscript.fetch_add(1, std::memory_order_relaxed);
      std::string eval = "*";
      AppendDecimal(eval, static_cast<int64_t>(call->args));
      eval += "\r\n";
      AppendBulk(eval, "EVAL");
      AppendBulk(eval, internal::kRedisScript);
      eval.append(call->command, call->header_len);
      if (call->asking) conn.Send(kAsking, [](const redisReply*, Failure) {});  // still importing
      conn.Send(eval, call);
      return;
    }
    if (auto to = ParseRedirect(err, conn.address()); to && call->redirects < kMaxRedirects) {
      ++call->redirects;
      stats.redirects.fetch_add(1, std::memory_order_relaxed);
      if (to->moved) Moved(call->slot, to->node);
      return Dispatch(call, Node(to->node), !to->moved);
    }
    if (err.rfind("TRYAGAIN", 0) == 0) {
      // A slot in migration holds some of the call's keys but not all (a script names several):
      // Redis asks to try again shortly. Until the deadline, from the slot's owner, each try
      // with its own redirects (ASK, then TRYAGAIN again from the importing node); a timeout then
      // is the slot's, not a sign that Redis is down (see OnDeadline).
      call->migrating = true;
      call->redirects = 0;
      ++call->refs;  // the timer's
      auto timer = std::make_shared<net::steady_timer>(ioc_, std::chrono::milliseconds(1));
      timer->async_wait([this, call, timer](const boost::system::error_code&) {
        if (!call->finished) Dispatch(call, NodeFor(call->slot), false);
        Release(call);
      });
      return;
    }
    stats.errors.fetch_add(1, std::memory_order_relaxed);
    return Finish(call, StoreErrc::kProtocol, std::string(err));
  }
  if (call->fast) return OnFastReply(call, r);
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 + kValuesPerCheck * call->n) {
    stats.errors.fetch_add(1, std::memory_order_relaxed);
    return Finish(call, StoreErrc::kProtocol, "unexpected script reply");
  }
  auto value = [&](size_t i) { return static_cast<int64_t>(r->element[i]->integer); };
  for (size_t i = 0; i < call->n; ++i) {
    const size_t b = 2 + i * kValuesPerCheck;
    core::Decision& d = call->decisions[i];
    d.allowed = value(b) == 1;
    d.code = static_cast<core::RejectCode>(value(b + 1));
    d.limit = value(b + 2);
    d.remaining = value(b + 3);
    d.reset = core::Duration::Micros(value(b + 4));
    d.retry_after = value(b + 5) < 0 ? core::Duration::Infinite() : core::Duration::Micros(value(b + 5));
    d.used = value(b + 6);
    d.over_allowance = value(b + 7) == 1;
  }
  ApplyResult result;
  result.committed = value(1) == 1;
  result.now = core::Instant::FromUnixMicros(value(0));
  Succeed(call, std::move(result));
}

void RedisStore::Impl::Succeed(Call* call, ApplyResult result) {
  call->finished = true;
  // Written only on a change: lanes on other threads read these on every call.
  if (shared_.consecutive_failures.load(std::memory_order_relaxed) != 0) {
    shared_.consecutive_failures.store(0, std::memory_order_relaxed);
    shared_.recovered_ns.store(SteadyClock::now().time_since_epoch().count(), std::memory_order_relaxed);
    stats.breaker_open.store(0, std::memory_order_relaxed);
  }
  // Finished calls at the head of the deadline queue leave it now (replies come in order, so
  // this is usually this call): the queue holds about the calls in flight, not a timeout's worth.
  while (!deadlines_.empty() && deadlines_.front()->finished) {
    Call* done = deadlines_.front();
    deadlines_.pop_front();
    Release(done);  // `call` itself stays referenced by the reply being handled
  }
  call->done(std::move(result));
}

// The token-bucket path: Redis returns {now, deficit of each check at now}, and the decisions
// follow from the same core code as MemoryStore::ApplyNow, on the same state: a bucket with that
// deficit at `now`. The script committed iff this computes `committed` (same exact integers).
void RedisStore::Impl::OnFastReply(Call* call, const redisReply* r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 1 + call->n) {
    stats.errors.fetch_add(1, std::memory_order_relaxed);
    return Finish(call, StoreErrc::kProtocol, "unexpected script reply");
  }
  for (size_t i = 0; i <= call->n; ++i) {
    if (r->element[i]->type != REDIS_REPLY_INTEGER) {
      stats.errors.fetch_add(1, std::memory_order_relaxed);
      return Finish(call, StoreErrc::kProtocol, "unexpected script reply");
    }
  }
  DecideFast(call, core::Instant::FromUnixMicros(static_cast<int64_t>(r->element[0]->integer)), r->element + 1);
}

void RedisStore::Impl::DecideFast(Call* call, core::Instant now, redisReply* const* deficits) {
  bool commit = call->consume;
  for (size_t i = 0; i < call->n; ++i) {
    const Check& c = call->checks[i];
    core::State state{static_cast<int64_t>(deficits[i]->integer), now.unix_micros()};
    call->decisions[i] = c.limit->Evaluate(state, c.cost, now);
    if (!call->decisions[i].allowed && c.enforced) commit = false;
  }
  if (!commit) {
    // As MemoryStore: nothing changed, so allowed checks report their state as it is.
    for (size_t i = 0; i < call->n; ++i) {
      const Check& c = call->checks[i];
      if (!call->decisions[i].allowed || c.cost == 0) continue;
      core::State state{static_cast<int64_t>(deficits[i]->integer), now.unix_micros()};
      call->decisions[i] = c.limit->Evaluate(state, 0, now);
    }
  }
  ApplyResult result;
  result.committed = commit;
  result.now = now;
  Succeed(call, std::move(result));
}

void RedisStore::Impl::Finish(Call* call, StoreErrc errc, std::string message, bool breaker) {
  call->finished = true;
  if (errc != StoreErrc::kOk && breaker) {
    const int failures = shared_.consecutive_failures.fetch_add(1, std::memory_order_relaxed) + 1;
    if (failures >= options_.breaker_failures) {
      const auto until = SteadyClock::now() + milliseconds(options_.breaker_open_ms);
      shared_.open_until_ns.store(until.time_since_epoch().count(), std::memory_order_relaxed);
      stats.breaker_open.store(1, std::memory_order_relaxed);
      if (failures == options_.breaker_failures && errc == StoreErrc::kTimeout) {
        for (auto& [address, conn] : nodes_) conn->Reset();
      }
    }
  }
  ApplyResult result;
  result.error = errc;
  result.message = std::move(message);
  call->done(std::move(result));
}

namespace {

RedisValue ToValue(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_INTEGER: return {r->integer};
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS: return {std::string(r->str, r->len)};
    case REDIS_REPLY_ERROR: return {RedisValue::Error{std::string(r->str, r->len)}};
    case REDIS_REPLY_ARRAY: {
      std::vector<RedisValue> items;
      for (size_t i = 0; i < r->elements; ++i) items.push_back(ToValue(r->element[i]));
      return {std::move(items)};
    }
    default: return {};
  }
}

}  // namespace

void RedisStore::Impl::Command(std::vector<std::string> args, size_t key_index,
                               std::function<void(core::Result<RedisValue>)> done) {
  const int slot = key_index < args.size() ? HashSlot(args[key_index]) : 0;
  auto cmd = std::make_shared<std::string>();
  AppendCommand(*cmd, args);
  net::post(ioc_, [this, cmd = std::move(cmd), slot, done = std::move(done)]() mutable {
    SendCommand(std::move(cmd), slot, NodeFor(slot), false, 0, std::move(done));
  });
}

// Plain commands (metering, exports) are not deadline-bound decisions: no breaker, no timer; a
// dead connection fails them at once.
void RedisStore::Impl::SendCommand(std::shared_ptr<const std::string> cmd, int slot, Connection& conn,
                                   bool asking, int redirects,
                                   std::function<void(core::Result<RedisValue>)> done) {
  if (asking) conn.Send(kAsking, [](const redisReply*, Failure) {});
  conn.Send(*cmd, [this, cmd, slot, redirects, from = conn.address(), done = std::move(done)](
                      const redisReply* r, Failure f) mutable {
    if (f != Failure::kNone) return done(core::Error{"redis unavailable"});
    if (r->type == REDIS_REPLY_ERROR && redirects < kMaxRedirects) {
      if (auto to = ParseRedirect(std::string_view(r->str, r->len), from)) {
        stats.redirects.fetch_add(1, std::memory_order_relaxed);
        if (to->moved) Moved(slot, to->node);
        return SendCommand(std::move(cmd), slot, Node(to->node), !to->moved, redirects + 1, std::move(done));
      }
    }
    done(ToValue(r));
  });
}

RedisStore::FireResult RedisStore::Impl::OnFired(int slot, const Connection& conn, const redisReply* r,
                                                  Failure f) {
  FireResult result = FireResult::kFailed;
  if (f == Failure::kNotSent) {
    result = FireResult::kNotRun;
  } else if (f == Failure::kNone && r->type != REDIS_REPLY_ERROR) {
    result = FireResult::kOk;
  } else if (f == Failure::kNone) {
    const std::string_view err(r->str, r->len);
    const auto to = ParseRedirect(err, conn.address());
    if (to && to->moved) Moved(slot, to->node);
    if (to || err.rfind("TRYAGAIN", 0) == 0) result = FireResult::kNotRun;
  }
  if (result != FireResult::kOk) stats.command_errors.fetch_add(1, std::memory_order_relaxed);
  return result;
}

void RedisStore::Impl::FireAndForget(std::vector<Fire> commands) {
  net::post(ioc_, [this, commands = std::move(commands)]() mutable {
    for (Fire& c : commands) {
      Connection& conn = NodeFor(c.slot);
      conn.Send(c.command, [this, slot = c.slot, &conn, done = std::move(c.done)](const redisReply* r, Failure f) {
        const FireResult result = OnFired(slot, conn, r, f);
        if (done) done(result);
      }, c.replies);
    }
  });
}

// ---------------------------------------------------------------------------------------------

namespace {

// Verifies the server against `ca_file` (the system's CAs when empty) and the host name of
// the URL; presents a client certificate when given.
core::Result<std::unique_ptr<net::ssl::context>> MakeTlsContext(const RedisStoreOptions& o) {
  auto context = std::make_unique<net::ssl::context>(net::ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION);
  context->set_verify_mode(net::ssl::verify_peer);
  boost::system::error_code ec;
  if (o.tls_ca_file.empty()) {
    context->set_default_verify_paths(ec);
    if (ec) return core::Error{"store.tls: cannot load the system's CA certificates: " + ec.message()};
  } else if (context->load_verify_file(o.tls_ca_file, ec); ec) {
    return core::Error{"store.tls.ca_file: cannot load '" + o.tls_ca_file + "': " + ec.message()};
  }
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return core::Error{"store.tls: cert_file and key_file go together"};
  }
  if (!o.tls_cert_file.empty()) {
    if (context->use_certificate_chain_file(o.tls_cert_file, ec); ec) {
      return core::Error{"store.tls.cert_file: cannot load '" + o.tls_cert_file + "': " + ec.message()};
    }
    if (context->use_private_key_file(o.tls_key_file, net::ssl::context::pem, ec); ec) {
      return core::Error{"store.tls.key_file: cannot load '" + o.tls_key_file + "': " + ec.message()};
    }
    if (SSL_CTX_check_private_key(context->native_handle()) != 1) {
      return core::Error{"store.tls.key_file: '" + o.tls_key_file + "' is not the key of cert_file"};
    }
  }
  return context;
}

}  // namespace

core::Result<std::unique_ptr<RedisStore>> RedisStore::Create(RedisStoreOptions options) {
  auto url = ParseUrl(options.url);
  if (!url) return core::Error{url.error()};
  if (options.timeout_ms <= 0) return core::Error{"store.timeout_ms: must be > 0"};
  std::unique_ptr<net::ssl::context> tls;
  if (url->tls) {
    auto context = MakeTlsContext(options);
    if (!context) return core::Error{context.error()};
    tls = std::move(context).value();
  } else if (!options.tls_ca_file.empty() || !options.tls_cert_file.empty() || !options.tls_key_file.empty()) {
    return core::Error{"store.tls: only with rediss:// or rediss-cluster://"};
  }
  std::unique_ptr<RedisStore> store(new RedisStore());
  store->shared_->tls = std::move(tls);
  store->impl_ = std::make_unique<Impl>(std::move(options), std::move(url).value(), *store->shared_, nullptr);
  return store;
}

RedisStore::RedisStore() : shared_(std::make_unique<Shared>()) {}
RedisStore::~RedisStore() = default;

std::string RedisStore::LastError() const {
  std::lock_guard lock(shared_->error_mu);
  return shared_->last_error;
}

namespace {
// The lane of the current thread, if it entered one (EnterLane).
thread_local const RedisStore* tl_store = nullptr;
thread_local RedisStore::Impl* tl_lane = nullptr;
}  // namespace

size_t RedisStore::AddLane(boost::asio::io_context& loop) {
  lanes_.push_back(std::make_unique<Impl>(impl_->options(), impl_->url(), *shared_, &loop));
  return lanes_.size() - 1;
}

void RedisStore::EnterLane(size_t lane) {
  tl_store = this;
  tl_lane = lanes_.at(lane).get();
}

void RedisStore::CloseLanes() {
  if (tl_store == this) tl_store = nullptr;
  lanes_.clear();
}

void RedisStore::Apply(const Batch& batch, std::span<core::Decision> decisions, Completion done) {
  (tl_store == this ? tl_lane : impl_.get())->Apply(batch, decisions, std::move(done));
}

const RedisStoreStats& RedisStore::stats() const { return shared_->stats; }

void RedisStore::Command(std::vector<std::string> args, size_t key_index,
                         std::function<void(core::Result<RedisValue>)> done) {
  impl_->Command(std::move(args), key_index, std::move(done));
}

void RedisStore::FireAndForget(std::vector<Fire> commands) { impl_->FireAndForget(std::move(commands)); }

int RedisStore::KeySlot(std::string_view key) { return HashSlot(key); }

void RedisStore::EncodeCommand(std::string& out, std::initializer_list<std::string_view> args) {
  AppendRequest(out, args);
}

std::string_view RedisStore::Script() { return internal::kRedisScript; }

}  // namespace tollgate::store
