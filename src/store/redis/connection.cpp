#include "store/redis/connection.hpp"

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <utility>

#include "store/redis/lane.hpp"
#include "store/redis/resp.hpp"
#include "store/redis/sentinel.hpp"

namespace tollgate::store::redis {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// At most this many batches of grouped decisions in flight per connection, so that Redis always
// has the next one queued while it runs one.
constexpr int kBatchesInFlight = 2;

}  // namespace

RedisValue ToValue(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      return {r->integer};
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      return {std::string(r->str, r->len)};
    case REDIS_REPLY_ERROR:
      return {RedisValue::Error{std::string(r->str, r->len)}};
    case REDIS_REPLY_ARRAY: {
      std::vector<RedisValue> items;
      for (size_t i = 0; i < r->elements; ++i) items.push_back(ToValue(r->element[i]));
      return {std::move(items)};
    }
    default:
      return {};
  }
}

Connection::Connection(Lane& lane, net::io_context& ioc, NodeAddress address, Peer peer)
    : lane_(lane),
      ioc_(ioc),
      address_(std::move(address)),
      peer_(peer),
      socket_(ioc),
      timer_(ioc) {}

Connection::~Connection() {
  if (reader_) redisReaderFree(reader_);
}

bool Connection::Usable() {
  if (peer_ == Peer::kNowhere) return false;
  if (state_ == State::kBackoff) {
    if (SteadyClock::now() < retry_at_ && !lane_.breaker().RecoveredSince(failed_at_)) return false;
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
  if (!Queue(command)) return lane_.OnReply(call, *this, nullptr, Failure::kConnection);
  pending_.push_back(Pending{call, 0, nullptr});
  Wake();
}

void Connection::SendGrouped(Call* call) {
  ++call->refs;
  if (!Usable()) return lane_.OnReply(call, *this, nullptr, Failure::kConnection);
  grouped_.push_back(call);
  Wake();
}

void Connection::Wake() {
  if (state_ == State::kIdle) Connect();
  if (state_ == State::kReady) ScheduleFlush();
}

// The waiting token-bucket requests leave in batches, while fewer than kBatchesInFlight are out.
void Connection::SendBatches() {
  while (batches_in_flight_ < kBatchesInFlight) {
    const std::span<const Lane::Group> groups = lane_.EncodeBatch(grouped_, out_);
    if (groups.empty()) return;
    for (const Lane::Group& g : groups) pending_.push_back(Pending{g.first, g.count, nullptr});
    pending_.back().ends_batch = true;
    ++batches_in_flight_;
  }
}

void Connection::Deliver(Pending& p, const redisReply* r, Failure f) {
  if (p.group > 1) {
    lane_.OnGroupReply(p.call, *this, r, f);
  } else if (p.call) {
    lane_.OnReply(p.call, *this, r, f);
  } else {
    p.fn(r, f);
  }
}

void Connection::Connect() {
  state_ = State::kConnecting;
  const uint64_t epoch = epoch_;
  if (reader_) redisReaderFree(reader_);
  reader_ = redisReaderCreate();
  QueueHandshake();
  if (net::ssl::context* context = lane_.tls_context())
    tls_ = MakeTlsStream(ioc_, *context, address_.host);
  timer_.expires_after(milliseconds(lane_.options().connect_timeout_ms));
  timer_.async_wait([this, epoch](const boost::system::error_code& ec) {
    if (!ec && epoch == epoch_ && (state_ == State::kConnecting || state_ == State::kVerifying))
      Fail("connect timeout");
  });
  Resolve(epoch);
}

void Connection::QueueHandshake() {
  gate_ = 0;
  if (peer_ != Peer::kNode) return;
  std::string hello;
  std::deque<Pending> hello_fns;
  auto check = [this](const char* what) {
    return Pending{nullptr, 0, [this, what](const redisReply* r, Failure f) {
                     if (f == Failure::kNone && r->type == REDIS_REPLY_ERROR) {
                       Fail(std::string(what) + " failed: " + std::string(r->str, r->len));
                     }
                   }};
  };
  const Url& url = lane_.url();
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
  // Sentinel: the node the sentinels named may have been demoted since (or they lag behind a
  // failover). ROLE goes with the handshake, and the rest (the script, decisions) only once the
  // node answered "master" (Verified), so a replica never receives a script.
  if (lane_.url().sentinel) {
    AppendCommand(hello, {"ROLE"});
    hello_fns.push_back(Pending{nullptr, 0, [this](const redisReply* r, Failure f) {
                                  if (f == Failure::kNone) Verified(r);
                                }});
    gate_ = hello.size();
  }
  // Load the script up front, so the first decisions after a (re)connect find it instead of
  // each paying a NOSCRIPT round trip. A failure here is not fatal: NOSCRIPT still recovers.
  AppendCommand(hello, {"SCRIPT", "LOAD", internal::kRedisScript});
  hello_fns.push_back(Pending{nullptr, 0, [](const redisReply*, Failure) {}});
  out_.insert(0, hello);
  for (auto it = hello_fns.rbegin(); it != hello_fns.rend(); ++it)
    pending_.push_front(std::move(*it));
}

void Connection::Resolve(uint64_t epoch) {
  auto resolver = std::make_shared<tcp::resolver>(ioc_);
  resolver->async_resolve(address_.host, address_.port,
                          [this, epoch, resolver](const boost::system::error_code& ec,
                                                  const tcp::resolver::results_type& results) {
                            if (epoch != epoch_) return;
                            if (ec) return Fail("resolve: " + ec.message());
                            OpenSocket(epoch, results);
                          });
}

void Connection::OpenSocket(uint64_t epoch, const tcp::resolver::results_type& endpoints) {
  net::async_connect(
      Socket(), endpoints,
      [this, epoch, tls = tls_](const boost::system::error_code& ec, const tcp::endpoint&) {
        if (epoch != epoch_) return;
        if (ec) return Fail("connect: " + ec.message());
        Socket().set_option(tcp::no_delay(true));
        if (!tls) return Ready();
        Handshake(epoch, tls);
      });
}

void Connection::Handshake(uint64_t epoch, std::shared_ptr<TlsStream> tls) {
  tls->async_handshake(net::ssl::stream_base::client,
                       [this, epoch, tls](const boost::system::error_code& ec) {
                         if (epoch != epoch_) return;
                         if (ec) return Fail("TLS handshake: " + ec.message());
                         Ready();
                       });
}

void Connection::Ready() {
  state_ = gate_ > 0 ? State::kVerifying : State::kReady;
  if (state_ == State::kReady) timer_.cancel();  // else the deadline holds until ROLE answers
  Read();
  Flush();
}

void Connection::Verified(const redisReply* r) {
  const RedisValue reply = ToValue(r);
  const std::string_view role = RoleOf(reply);
  if (role != "master") {
    return Fail("not the master (ROLE: " +
                std::string(role.empty() ? std::string_view("unexpected reply") : role) + ")");
  }
  timer_.cancel();
  state_ = State::kReady;
  ScheduleFlush();
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
  if (state_ != State::kReady && state_ != State::kVerifying) return;
  if (state_ == State::kReady) SendBatches();
  if (write_in_flight_ || out_.empty()) return;
  writing_.clear();
  if (state_ == State::kVerifying) {  // the handshake up to ROLE; the rest once verified
    if (gate_ == 0) return;
    writing_.assign(out_, 0, gate_);
    out_.erase(0, gate_);
    gate_ = 0;
  } else {
    writing_.swap(out_);
  }
  write_in_flight_ = true;
  auto written = [this, epoch = epoch_, tls = tls_](const boost::system::error_code& ec, size_t) {
    if (epoch != epoch_) return;
    write_in_flight_ = false;
    if (ec) return Fail("write: " + ec.message());
    Flush();
  };
  OnStream(
      [&](auto& stream) { net::async_write(stream, net::buffer(writing_), std::move(written)); });
}

void Connection::Read() {
  auto got = [this, epoch = epoch_, tls = tls_](const boost::system::error_code& ec, size_t n) {
    if (epoch != epoch_) return;
    if (ec) return Fail("read: " + ec.message());
    if (!OnRead(n, epoch)) return;
    // Answered, past the handshake: a refused AUTH (or a replica's ROLE) keeps backing off.
    if (state_ == State::kReady) backoff_ms_ = 0;
    if (!grouped_.empty()) ScheduleFlush();  // the next batch: everything that waited meanwhile
    Read();
  };
  OnStream([&](auto& stream) { stream.async_read_some(net::buffer(read_buf_), std::move(got)); });
}

bool Connection::OnRead(size_t n, uint64_t epoch) {
  if (redisReaderFeed(reader_, read_buf_.data(), n) != REDIS_OK) {
    Fail("bad reply stream");
    return false;
  }
  for (;;) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
      Fail("bad reply");
      return false;
    }
    if (!raw) return true;
    ReplyPtr reply(static_cast<redisReply*>(raw));
    if (pending_.empty() && push_) {
      push_(reply.get(), Failure::kNone);
      if (epoch != epoch_) return false;
      continue;
    }
    if (pending_.empty()) {
      Fail("unexpected reply");
      return false;
    }
    Pending p = std::move(pending_.front());
    pending_.pop_front();
    if (p.ends_batch) --batches_in_flight_;
    Deliver(p, reply.get(), Failure::kNone);
    if (epoch != epoch_) return false;  // the reply's handler failed the connection
  }
}

void Connection::Fail(const std::string& why) {
  // Verifying, only the handshake was written: what was queued after it was not.
  const bool nothing_written = state_ == State::kConnecting || state_ == State::kVerifying;
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
  gate_ = 0;
  write_in_flight_ = false;
  flush_scheduled_ = false;
  lane_.stats().reconnects.fetch_add(1, std::memory_order_relaxed);
  batches_in_flight_ = 0;
  std::deque<Pending> failed;
  failed.swap(pending_);
  for (Call* call : grouped_) failed.push_back(Pending{call, 1, nullptr});
  grouped_.clear();
  lane_.NoteFailure(address_.host + ":" + address_.port + ": " + why);
  for (auto& p : failed)
    Deliver(p, nullptr, nothing_written ? Failure::kNotSent : Failure::kConnection);
  if (push_) push_(nullptr, Failure::kConnection);
  // A failover moves the master elsewhere (a cluster's slots, Sentinel's master): ask again.
  if (peer_ == Peer::kNode && (lane_.url().cluster || lane_.url().sentinel))
    lane_.RefreshTopology();
}

}  // namespace tollgate::store::redis
