// One connection to one Redis node: the socket or TLS stream, the handshake, reconnecting with
// backoff, writes that carry everything queued in one turn of the event loop, and replies handed
// out in the order of their requests.
#pragma once

#include <hiredis/hiredis.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <tollgate/store/redis_store.hpp>

#include "store/redis/tls.hpp"
#include "store/redis/url.hpp"

namespace tollgate::store::redis {

class Lane;
struct Call;

// What a connection talks to. kNode: a Redis node (AUTH, SELECT and SCRIPT LOAD on connecting;
// with Sentinel, ROLE first, and nothing else is written until the node answers that it is the
// master). kSentinel: a sentinel (no handshake). kNowhere: the master is not known yet (no
// sentinel has answered): every command fails at once, unsent.
enum class Peer { kNode, kSentinel, kNowhere };

// Why a command got no reply. kNotSent: the connection failed before it was written
// (connecting, or waiting out its reconnect backoff), so Redis certainly did not run it;
// kConnection: it may have.
enum class Failure { kNone, kConnection, kNotSent };

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// A reply as a RedisValue (RESP2 types; anything else is nil).
RedisValue ToValue(const redisReply* r);

// Not thread-safe: used on its lane's thread only. Decisions' replies go to the lane
// (Lane::OnReply, Lane::OnGroupReply); the lane forms the batches of grouped decisions
// (Lane::EncodeBatch) when this connection can take one.
class Connection {
 public:
  using ReplyFn = std::function<void(const redisReply*, Failure)>;

  Connection(Lane& lane, boost::asio::io_context& ioc, NodeAddress address,
             Peer peer = Peer::kNode);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Queues `command` (RESP-encoded). Everything queued in one turn of the event loop leaves in
  // one write. Its reply goes to `fn`; `command` may hold several requests: `fn` then gets each
  // of their `replies`. A connection in backoff fails them at once (kNotSent).
  void Send(std::string_view command, ReplyFn fn, size_t replies = 1);
  // A decision's script call: takes a reference to `call` (Call::refs) for its reply, which goes
  // to Lane::OnReply.
  void Send(std::string_view command, Call* call);
  // A token-bucket decision: takes a reference and waits to leave in the next batch, while fewer
  // than kBatchesInFlight are in flight.
  void SendGrouped(Call* call);

  const NodeAddress& address() const { return address_; }
  // Drops the connection (its pending commands fail); the next command reconnects. Used when the
  // breaker opens on timeouts: a connection that died without closing would otherwise be
  // probed until the kernel gives up on it. One still connecting has its own deadline
  // (connect_timeout_ms), which a slow handshake may need.
  void Reset() {
    if (state_ == State::kReady) Fail("reset");
  }
  // Drops the connection in any state but idle or backing off (its pending commands fail, and
  // what was queued is not written): the node is no longer the master (Sentinel).
  void Close(const std::string& why) {
    if (state_ != State::kIdle && state_ != State::kBackoff) Fail(why);
  }
  // Replies that answer no request, the messages of a subscription (SUBSCRIBE), go to `fn`; and
  // (nullptr, kConnection) when the connection fails, which ends the subscription.
  void OnPush(ReplyFn fn) { push_ = std::move(fn); }
  // Nothing queued, nothing in flight.
  bool Idle() const {
    return pending_.empty() && out_.empty() && grouped_.empty() && !write_in_flight_;
  }

 private:
  // kVerifying: connected, the handshake up to ROLE written, the rest held until the node
  // answers that it is the master (Sentinel only).
  enum class State { kIdle, kConnecting, kVerifying, kReady, kBackoff };
  // A reply to come: a decision (call), a group of them (the first call, `group` of them, linked
  // by Call::next; a group of one is sent as a plain call), or any other command (fn).
  struct Pending {
    Call* call = nullptr;
    size_t group = 0;
    ReplyFn fn;
    bool ends_batch = false;  // the last reply of a batch of groups (SendBatches)
  };

  bool Usable();  // false: in backoff, fail at once
  bool Queue(std::string_view command);
  void Wake();  // connects, or schedules a write of what is queued
  void SendBatches();
  void Deliver(Pending& p, const redisReply* r, Failure f);
  void Connect();
  void QueueHandshake();  // AUTH, SELECT and SCRIPT LOAD, ahead of what is queued
  // The steps of Connect(), each after the one before succeeded on the same `epoch`.
  void Resolve(uint64_t epoch);
  void OpenSocket(uint64_t epoch, const boost::asio::ip::tcp::resolver::results_type& endpoints);
  void Handshake(uint64_t epoch, std::shared_ptr<TlsStream> tls);
  void Ready();                        // connected (and, with TLS, through the handshake)
  void Verified(const redisReply* r);  // ROLE's reply: the master, or the connection fails
  boost::asio::ip::tcp::socket& Socket() { return tls_ ? tls_->next_layer() : socket_; }
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
  // Hands the replies in `n` bytes just read to their requests; false when the connection failed.
  bool OnRead(size_t n, uint64_t epoch);
  void Fail(const std::string& why);

  Lane& lane_;
  boost::asio::io_context& ioc_;
  NodeAddress address_;
  const Peer peer_;
  boost::asio::ip::tcp::socket socket_;  // without TLS
  // With TLS, the stream of the current connection, which owns its socket. Each operation holds
  // it, so the stream of a failed connection lives until its operations have returned.
  std::shared_ptr<TlsStream> tls_;
  boost::asio::steady_timer timer_;
  State state_ = State::kIdle;
  redisReader* reader_ = nullptr;
  std::string out_;
  size_t gate_ = 0;  // while kVerifying, the bytes at the front of out_ that may go: up to ROLE
  std::string writing_;
  bool write_in_flight_ = false;
  bool flush_scheduled_ = false;
  std::deque<Pending> pending_;  // in the order of the replies to come
  std::deque<Call*> grouped_;    // token-bucket requests waiting for the next batch
  ReplyFn push_;                 // OnPush
  int batches_in_flight_ = 0;
  std::array<char, 16 * 1024> read_buf_;
  std::chrono::steady_clock::time_point retry_at_;
  std::chrono::steady_clock::time_point failed_at_;
  int backoff_ms_ = 0;
  uint64_t epoch_ = 0;  // bumps on every failure: stale handlers see a different epoch
};

}  // namespace tollgate::store::redis
