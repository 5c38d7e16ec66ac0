#include "h2_upstream.hpp"

#include <charconv>
#include <cstring>
#include <unordered_set>
#include <vector>

#include <nghttp2/nghttp2.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http.hpp>

#include <tollgate/util/ascii.hpp>

#include "fields.hpp"
#include "h2_stream.hpp"
#include "relay.hpp"

// GCC 12 and Asio's recycling allocator for coroutine frames: see worker.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace tollgate::http {

namespace {

namespace bhttp = boost::beast::http;
using RequestParser = bhttp::request_parser<bhttp::buffer_body>;

constexpr size_t kChunk = 16 * 1024;
constexpr size_t kInCap = 64 * 1024;  // request body bytes held for the upstream
constexpr int32_t kConnectionWindow = 1 << 20;

nghttp2_nv Nv(std::string_view name, std::string_view value) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          NGHTTP2_NV_FLAG_NONE};
}

// One request on the connection: its body as the lane gives it, its response as it comes.
struct UpStream {
  explicit UpStream(const net::any_io_executor& ex) : wake(ex), body_wake(ex) {}
  int32_t id = -1;
  bool head_request = false;
  std::string in;  // request body bytes for the upstream
  bool in_end = false;
  bool deferred = false;  // nghttp2 waits for `in`
  int status = 0;
  std::vector<H2Field> fields;  // the response's, then its trailers'
  bool has_head = false;        // its final HEADERS came
  std::string head;             // the response head as HTTP/1.1, until written to the lane
  bool chunked = false;
  std::string out;  // response body bytes for the lane
  std::string trailers;
  bool ended = false;   // the upstream's END_STREAM
  bool failed = false;  // reset, or the connection lost, before it
  Signal wake;          // for the lane's writer
  Signal body_wake;     // for the request body's pump
};

// The response head of `s` (its :status and fields) as HTTP/1.1, chunked when a body may follow.
void RenderHead(UpStream& s, bool body_follows) {
  const auto status = bhttp::int_to_status(static_cast<unsigned>(s.status));
  std::string& h = s.head;
  h.append("HTTP/1.1 ").append(std::to_string(s.status)).append(" ");
  h.append(bhttp::obsolete_reason(status)).append("\r\n");
  bool has_length = false;
  for (const H2Field& f : s.fields) {
    if (f.name.starts_with(':')) continue;
    if (f.name == "content-length") {
      has_length = true;
      if (body_follows) continue;
    } else if (IsHopByHopOrFraming(f.name)) {
      continue;
    }
    h.append(f.name).append(": ").append(f.value).append("\r\n");
  }
  const bool bodiless = s.head_request || s.status == 204 || s.status == 304;
  s.chunked = body_follows && !bodiless;
  if (s.chunked) {
    h.append("transfer-encoding: chunked\r\n");
  } else if (!has_length && !bodiless) {
    h.append("content-length: 0\r\n");
  }
  h.append("\r\n");
  s.fields.clear();
  s.has_head = true;
}

}  // namespace

// One HTTP/2 connection to the upstream. Not thread-safe: the worker's thread.
class H2Session : public std::enable_shared_from_this<H2Session> {
 public:
  H2Session(ConnList& conns, net::io_context& ioc, const H2Upstream::Options& o)
      : conn_(conns, ioc), options_(o), ex_(ioc.get_executor()), write_wake_(ex_) {}
  ~H2Session() {
    if (session_) nghttp2_session_del(session_);
  }

  // Connects, and starts the session's loops; false with `ec` when it could not.
  net::awaitable<bool> Open(beast::error_code& ec);
  // Whether new streams may go on it (no GOAWAY, not lost).
  bool Usable() const { return !dead_ && !goaway_; }
  // The request the lane's `p` has read the head of, and its body as it comes, as one stream;
  // its response written to `lane`. Whether the lane may carry another.
  net::awaitable<bool> Exchange(Lane& lane, RequestParser& p);

 private:
  bool Start();
  net::awaitable<void> ReadLoop();
  net::awaitable<void> WriteLoop();
  net::awaitable<void> PumpBody(std::shared_ptr<UpStream> s, Lane& lane, RequestParser& p,
                                bool& running);
  net::awaitable<bool> Relay(UpStream& s, Lane& lane);
  void End();  // the connection is lost: every stream fails
  static UpStream* StreamOf(nghttp2_session* session, int32_t id) {
    return static_cast<UpStream*>(nghttp2_session_get_stream_user_data(session, id));
  }
  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t name_len, const uint8_t* value, size_t value_len, uint8_t, void*);
  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* self);
  static int OnDataChunk(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t len,
                         void*);
  static int OnStreamClose(nghttp2_session*, int32_t id, uint32_t error, void* self);
  static ssize_t ReadIn(nghttp2_session*, int32_t id, uint8_t* buf, size_t length, uint32_t* flags,
                        nghttp2_data_source*, void*);

  Conn conn_;
  const H2Upstream::Options options_;
  net::any_io_executor ex_;
  nghttp2_session* session_ = nullptr;
  std::unordered_set<UpStream*> open_;
  Signal write_wake_;
  bool dead_ = false;
  bool goaway_ = false;
};

net::awaitable<bool> H2Session::Open(beast::error_code& ec) {
  tcp::resolver resolver(ex_);
  auto [rec, results] = co_await resolver.async_resolve(options_.host, options_.port, kTuple);
  if (rec) {
    ec = rec;
    co_return false;
  }
  conn_.ExpiresAfter(options_.connect_timeout);
  auto [cec, ep] = co_await net::async_connect(conn_.socket, results, kTuple);
  if (cec) {
    ec = conn_.Check(cec);
    co_return false;
  }
  beast::error_code ignored;
  conn_.socket.set_option(tcp::no_delay(true), ignored);
  conn_.socket.non_blocking(true, ignored);
  if (options_.start_tls) {
    if (!options_.start_tls(conn_.socket)) {
      ec = net::error::no_memory;
      co_return false;
    }
    auto [hec] = co_await conn_.socket.async_handshake(kTuple);
    if (hec) {
      ec = conn_.Check(hec);
      co_return false;
    }
    if (conn_.socket.Alpn() != "h2") {  // an upstream that does not speak it
      ec = net::error::no_protocol_option;
      co_return false;
    }
  }
  conn_.Disarm();
  if (!Start()) {
    ec = net::error::no_memory;
    co_return false;
  }
  auto self = shared_from_this();
  net::co_spawn(ex_, ReadLoop(), [self](std::exception_ptr) { self->End(); });
  net::co_spawn(ex_, WriteLoop(), [self](std::exception_ptr) { self->End(); });
  co_return true;
}

bool H2Session::Start() {
  nghttp2_session_callbacks* cb = nullptr;
  if (nghttp2_session_callbacks_new(&cb) != 0) return false;
  nghttp2_session_callbacks_set_on_header_callback(cb, OnHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, OnFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, OnDataChunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, OnStreamClose);
  nghttp2_option* opt = nullptr;
  if (nghttp2_option_new(&opt) != 0) {
    nghttp2_session_callbacks_del(cb);
    return false;
  }
  // Flow control is ours: response DATA is acknowledged once it is on its lane.
  nghttp2_option_set_no_auto_window_update(opt, 1);
  const int made = nghttp2_session_client_new2(&session_, cb, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
  if (made != 0) return false;
  const nghttp2_settings_entry entries[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
  return nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, entries, std::size(entries)) == 0 &&
         nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow) ==
             0;
}

void H2Session::End() {
  if (dead_) return;
  dead_ = true;
  beast::error_code ignored;
  conn_.socket.cancel(ignored);
  write_wake_.Notify();
  for (UpStream* s : open_) {
    s->failed = !s->ended;
    s->wake.Notify();
    s->body_wake.Notify();
  }
}

net::awaitable<void> H2Session::ReadLoop() {
  auto self = shared_from_this();
  beast::flat_buffer buffer;
  while (!dead_ && nghttp2_session_want_read(session_)) {
    auto [ec, n] = co_await conn_.socket.async_read_some(buffer.prepare(kChunk), kTuple);
    if (ec) break;
    buffer.commit(n);
    const auto data = buffer.data();
    const ssize_t r =
        nghttp2_session_mem_recv(session_, static_cast<const uint8_t*>(data.data()), data.size());
    buffer.consume(buffer.size());
    write_wake_.Notify();
    if (r < 0) break;
  }
  End();
}

net::awaitable<void> H2Session::WriteLoop() {
  auto self = shared_from_this();
  std::string out;
  while (!dead_) {
    out.clear();
    while (out.size() < 4 * kChunk) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) {
        End();
        co_return;
      }
      if (n == 0) break;
      out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (out.empty()) {
      if (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_)) break;
      co_await write_wake_.Wait();
      continue;
    }
    const beast::error_code ec = co_await WriteAll(conn_, net::buffer(out), options_.write_timeout);
    conn_.Disarm();
    if (ec) break;
  }
  End();
}

int H2Session::OnHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                        size_t name_len, const uint8_t* value, size_t value_len, uint8_t, void*) {
  UpStream* s = StreamOf(session, frame->hd.stream_id);
  if (!s || frame->hd.type != NGHTTP2_HEADERS) return 0;
  const std::string_view n(reinterpret_cast<const char*>(name), name_len);
  const std::string_view v(reinterpret_cast<const char*>(value), value_len);
  if (!s->has_head && n == ":status") std::from_chars(v.data(), v.data() + v.size(), s->status);
  s->fields.push_back({std::string(n), std::string(v)});
  return 0;
}

int H2Session::OnFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* self) {
  auto& c = *static_cast<H2Session*>(self);
  if (frame->hd.type == NGHTTP2_GOAWAY) c.goaway_ = true;  // its streams end; no new ones
  UpStream* s = frame->hd.stream_id ? StreamOf(session, frame->hd.stream_id) : nullptr;
  if (!s) return 0;
  const bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (frame->hd.type == NGHTTP2_HEADERS) {
    if (!s->has_head) {
      if (s->status < 200) {  // an interim response (100 Continue): not relayed
        s->fields.clear();
        s->status = 0;
        return 0;
      }
      RenderHead(*s, !end);
    } else {  // the trailers
      for (const H2Field& f : s->fields) {
        if (f.name.starts_with(':') || IsHopByHopOrFraming(f.name)) continue;
        s->trailers.append(f.name).append(": ").append(f.value).append("\r\n");
      }
      s->fields.clear();
    }
  }
  if (end) s->ended = true;
  s->wake.Notify();
  return 0;
}

int H2Session::OnDataChunk(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* data,
                           size_t len, void*) {
  UpStream* s = StreamOf(session, id);
  if (!s) {
    nghttp2_session_consume(session, id, len);
    return 0;
  }
  s->out.append(reinterpret_cast<const char*>(data), len);
  s->wake.Notify();
  return 0;
}

int H2Session::OnStreamClose(nghttp2_session* session, int32_t id, uint32_t, void* self) {
  auto& c = *static_cast<H2Session*>(self);
  UpStream* s = StreamOf(session, id);
  if (!s) return 0;
  s->failed = !s->ended;
  s->wake.Notify();
  s->body_wake.Notify();
  nghttp2_session_set_stream_user_data(session, id, nullptr);
  c.open_.erase(s);
  return 0;
}

ssize_t H2Session::ReadIn(nghttp2_session* session, int32_t id, uint8_t* buf, size_t length,
                          uint32_t* flags, nghttp2_data_source*, void*) {
  UpStream* s = StreamOf(session, id);
  if (!s) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  const size_t n = std::min(length, s->in.size());
  std::memcpy(buf, s->in.data(), n);
  s->in.erase(0, n);
  s->body_wake.Notify();
  if (s->in.empty() && s->in_end) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
  } else if (n == 0) {
    s->deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  return static_cast<ssize_t>(n);
}

net::awaitable<void> H2Session::PumpBody(std::shared_ptr<UpStream> s, Lane& lane, RequestParser& p,
                                         bool& running) {
  auto chunk = std::make_unique_for_overwrite<char[]>(kChunk);
  while (!p.is_done() && !s->failed && !s->ended) {
    while (s->in.size() >= kInCap && !s->failed && !s->ended) co_await s->body_wake.Wait();
    if (s->failed || s->ended) break;
    p.get().body().data = chunk.get();
    p.get().body().size = kChunk;
    auto [ec, n] = co_await bhttp::async_read(lane.conn.socket, lane.buffer, p, kTuple);
    if (ec && ec != bhttp::error::need_buffer) {
      if (!s->failed && !s->ended && s->id > 0 && !dead_)
        nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
      s->failed = true;
      break;
    }
    s->in.append(chunk.get(), kChunk - p.get().body().size);
    s->in_end = p.is_done();
    if (s->deferred && !dead_) {
      s->deferred = false;
      nghttp2_session_resume_data(session_, s->id);
    }
    write_wake_.Notify();
  }
  running = false;
  s->wake.Notify();
}

net::awaitable<bool> H2Session::Relay(UpStream& s, Lane& lane) {
  bool head_sent = false;
  char size_line[24];
  for (;;) {
    std::string w;
    size_t taken = 0;
    if (!head_sent && s.has_head) {
      w = std::move(s.head);
      head_sent = true;
    }
    if (head_sent && !s.out.empty()) {
      // (A body after a head that has none, HEAD's or a 204's, is dropped.)
      taken = s.out.size();
      if (s.chunked) {
        const auto r = std::to_chars(size_line, size_line + sizeof size_line, taken, 16);
        w.append(size_line, r.ptr).append("\r\n").append(s.out).append("\r\n");
      }
      s.out.clear();
    }
    const bool last = head_sent && s.ended && s.out.empty();
    if (last && s.chunked) w.append("0\r\n").append(s.trailers).append("\r\n");
    if (!w.empty()) {
      const beast::error_code ec =
          co_await WriteAll(lane.conn, net::buffer(w), options_.write_timeout);
      lane.conn.Disarm();
      if (taken > 0 && !dead_) nghttp2_session_consume(session_, s.id, taken);
      write_wake_.Notify();
      if (ec) co_return false;
    }
    if (last) co_return true;
    if (s.failed || (s.ended && !s.has_head)) co_return false;
    if (w.empty()) co_await s.wake.Wait();
  }
}

net::awaitable<bool> H2Session::Exchange(Lane& lane, RequestParser& p) {
  auto self = shared_from_this();
  const auto& m = p.get();
  auto s = std::make_shared<UpStream>(ex_);
  s->head_request = m.method() == bhttp::verb::head;
  std::vector<H2Field> f = {{":method", std::string(m.method_string())},
                            {":scheme", options_.scheme},
                            {":authority", std::string(m[bhttp::field::host])},
                            {":path", std::string(m.target())},
                            {"te", "trailers"}};  // gRPC servers ask for it
  for (const auto& field : m) {
    if (IsHopByHopOrFraming(field.name_string()) || field.name() == bhttp::field::host) continue;
    f.push_back({util::AsciiLower(field.name_string()), std::string(field.value())});
  }
  std::vector<nghttp2_nv> nv;
  nv.reserve(f.size());
  for (const H2Field& x : f) nv.push_back(Nv(x.name, x.value));
  const bool body = !p.is_done();
  nghttp2_data_provider provider{};
  provider.read_callback = ReadIn;
  s->in_end = !body;
  s->id = nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(),
                                 body ? &provider : nullptr, s.get());
  if (s->id < 0) co_return false;
  open_.insert(s.get());
  write_wake_.Notify();
  bool pumping = body;
  if (body) net::co_spawn(ex_, PumpBody(s, lane, p, pumping), net::detached);
  const bool relayed = co_await Relay(*s, lane);
  if (!s->ended && !s->failed && !dead_) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
    write_wake_.Notify();
  }
  s->failed = s->failed || !s->ended;
  s->body_wake.Notify();
  beast::error_code ignored;
  if (pumping) lane.conn.socket.cancel(ignored);
  while (pumping) co_await s->wake.Wait();
  if (open_.erase(s.get()) && !dead_)
    nghttp2_session_set_stream_user_data(session_, s->id, nullptr);
  co_return relayed&& p.is_done() && p.keep_alive();
}

class H2Upstream::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(net::io_context& ioc, ConnList& conns, Options o)
      : ioc_(ioc), conns_(conns), options_(std::move(o)), connected_(ioc) {}

  // The connection new streams go on: the one up, else a new one (one connects at a time; the
  // others wait for it). Null with `ec` when it could not be made.
  net::awaitable<std::shared_ptr<H2Session>> Ready(beast::error_code& ec) {
    for (;;) {
      if (session_ && session_->Usable()) co_return session_;
      if (!connecting_) break;
      const uint64_t round = rounds_;
      co_await connected_.async_wait(kTuple);
      if (round != rounds_ && !(session_ && session_->Usable())) {
        ec = last_error_;
        co_return nullptr;
      }
    }
    connecting_ = true;
    connected_.expires_at(Clock::time_point::max());
    auto s = std::make_shared<H2Session>(conns_, ioc_, options_);
    const bool up = co_await s->Open(ec);
    session_ = up ? s : nullptr;
    last_error_ = ec;
    ++rounds_;
    connecting_ = false;
    connected_.cancel();
    co_return session_;
  }

  // Serves `lane`: each request read from it, relayed as a stream, until it ends.
  net::awaitable<void> Serve(std::unique_ptr<Lane> lane) {
    auto self = shared_from_this();
    for (;;) {
      RequestParser p;
      p.header_limit(static_cast<uint32_t>(kMaxUpstreamHead));
      p.body_limit(boost::none);
      auto [ec, n] = co_await bhttp::async_read_header(lane->conn.socket, lane->buffer, p, kTuple);
      if (ec) break;
      beast::error_code rec;
      std::shared_ptr<H2Session> s = co_await Ready(rec);
      if (!s || !co_await s->Exchange(*lane, p)) break;
    }
    beast::error_code ignored;
    lane->conn.socket.close(ignored);
  }

  net::io_context& ioc_;
  ConnList& conns_;
  const Options options_;
  std::shared_ptr<H2Session> session_;
  bool connecting_ = false;
  uint64_t rounds_ = 0;  // connections tried
  beast::error_code last_error_;
  net::steady_timer connected_;  // cancelled when a connection was tried
};

H2Upstream::H2Upstream(net::io_context& ioc, ConnList& conns, Options options)
    : impl_(std::make_shared<Impl>(ioc, conns, std::move(options))) {}

H2Upstream::~H2Upstream() = default;

net::awaitable<bool> H2Upstream::OpenLane(tcp::socket& lane, beast::error_code& ec) {
  std::shared_ptr<Impl> impl = impl_;
  if (!co_await impl->Ready(ec)) co_return false;
  tcp::socket ours(impl->ioc_);
  if (!OpenSocketPair(impl->ioc_.get_executor(), ours, lane)) {
    ec = net::error::no_descriptors;
    co_return false;
  }
  net::co_spawn(impl->ioc_, impl->Serve(std::make_unique<Lane>(impl->conns_, std::move(ours))),
                net::detached);
  co_return true;
}

}  // namespace tollgate::http
