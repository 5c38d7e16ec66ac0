#include "h2_connection.hpp"

#include <sys/socket.h>

#include <charconv>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nghttp2/nghttp2.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http.hpp>

#include <tollgate/contract/contract.hpp>

#include "flood_guard.hpp"
#include "h2_head.hpp"
#include "h2_stream.hpp"
#include "relay.hpp"

// GCC 12 and Asio's recycling allocator for coroutine frames: see worker.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace tollgate::http {

H2Counters::H2Counters(metrics::Registry& m)
    : connections_h2(m.Counter("tollgate_http2_connections_total", "protocol=\"h2\"")),
      connections_h2c(m.Counter("tollgate_http2_connections_total", "protocol=\"h2c\"")),
      streams(m.Counter("tollgate_http2_streams_total")),
      resets_received(m.Counter("tollgate_http2_resets_received_total")),
      flood_resets(m.Counter("tollgate_http2_floods_total", "kind=\"resets\"")),
      flood_control(m.Counter("tollgate_http2_floods_total", "kind=\"control_frames\"")),
      flood_headers(m.Counter("tollgate_http2_floods_total", "kind=\"headers\"")),
      malformed(m.Counter("tollgate_http2_malformed_total")),
      refused(m.Counter("tollgate_http2_refused_streams_total")),
      goaway_no_error(m.Counter("tollgate_http2_goaways_sent_total", "error=\"no_error\"")),
      goaway_protocol(m.Counter("tollgate_http2_goaways_sent_total", "error=\"protocol_error\"")),
      goaway_calm(m.Counter("tollgate_http2_goaways_sent_total", "error=\"enhance_your_calm\"")),
      goaway_other(m.Counter("tollgate_http2_goaways_sent_total", "error=\"other\"")) {}

namespace {

namespace bhttp = boost::beast::http;

constexpr size_t kChunk = 16 * 1024;     // read from the client at a time
constexpr size_t kIdleChunk = 2 * 1024;  // while no stream is served

nghttp2_nv Nv(std::string_view name, std::string_view value) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          NGHTTP2_NV_FLAG_NONE};
}

// The session, its streams and their lanes. Not thread-safe: the worker's thread.
class H2Connection final : public H2StreamPort {
 public:
  H2Connection(Conn& conn, const H2Settings& settings, H2Counters& counters, ConnList& conns,
               LaneStarter start_lane)
      : conn_(conn),
        settings_(settings),
        counters_(counters),
        conns_(conns),
        start_lane_(std::move(start_lane)),
        ex_(conn.socket.get_executor()),
        write_wake_(ex_),
        ended_(ex_),
        resets_(settings.config.max_resets, milliseconds(settings.config.flood_interval_ms)),
        control_(settings.config.max_control_frames,
                 milliseconds(settings.config.flood_interval_ms)) {}
  ~H2Connection() override {
    if (session_) nghttp2_session_del(session_);
  }

  net::awaitable<void> Run(beast::flat_buffer& buffer);

 private:
  bool Start();
  net::awaitable<void> ReadLoop(beast::flat_buffer& buffer);
  net::awaitable<void> WriteLoop();
  // Whether the session has nothing more to do.
  bool Finished() const {
    return !nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_);
  }
  // The connection's deadline: none while a stream is served, else the idle timeout from when
  // the last one ended (frames of no stream, PINGs say, do not extend it). A write sets its own.
  void Rearm() {
    if (writing_) return;
    if (running_ > 1) {  // more than the read loop
      conn_.Disarm();
    } else {
      conn_.ExpiresAt(idle_since_ + settings_.idle_timeout);
    }
  }

  // A stream's request and response, on a lane.
  net::awaitable<void> Serve(std::shared_ptr<H2Stream> s);
  std::unique_ptr<Lane> TakeLane();
  void GiveBack(std::unique_ptr<Lane> lane);  // for another stream, if it may serve one
  // An answer of our own, whole (a 431 for a header block too large).
  void Answer(H2Stream& s, int status, std::string_view code, std::string_view detail);
  // H2StreamPort.
  void SubmitResponse(H2Stream& s, int status, std::span<const H2Field> fields, bool body) override;
  void Consumed(H2Stream& s, size_t n) override {
    nghttp2_session_consume(session_, s.id, n);
    write_wake_.Notify();
  }
  void MoreOut(H2Stream& s) override {
    if (s.deferred) {
      s.deferred = false;
      nghttp2_session_resume_data(session_, s.id);
    }
    write_wake_.Notify();
  }
  void Reset(H2Stream& s) override { Reset(s.id, NGHTTP2_INTERNAL_ERROR); }
  void Spawn(net::awaitable<void> work) override;
  milliseconds SendTimeout() const override { return settings_.send_timeout; }
  void Reset(int32_t id, uint32_t error) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, error);
    write_wake_.Notify();
  }
  void Terminate(std::atomic<uint64_t>& counted) {
    counted.fetch_add(1, std::memory_order_relaxed);
    nghttp2_session_terminate_session(session_, NGHTTP2_ENHANCE_YOUR_CALM);
  }
  static H2Stream* StreamOf(nghttp2_session* session, int32_t id) {
    return static_cast<H2Stream*>(nghttp2_session_get_stream_user_data(session, id));
  }

  // nghttp2's callbacks.
  static int OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* self);
  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t name_len, const uint8_t* value, size_t value_len, uint8_t flags,
                      void* self);
  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* self);
  static int OnFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* self);
  static int OnDataChunk(nghttp2_session*, uint8_t flags, int32_t id, const uint8_t* data,
                         size_t len, void* self);
  static int OnStreamClose(nghttp2_session*, int32_t id, uint32_t error, void* self);
  static ssize_t ReadOut(nghttp2_session*, int32_t id, uint8_t* buf, size_t length, uint32_t* flags,
                         nghttp2_data_source* source, void* self);
  void HeadersDone(H2Stream& s);
  // Flood accounting of one frame received; false when the connection is ended for it.
  bool CountFrame(const nghttp2_frame& frame);

  Conn& conn_;
  const H2Settings& settings_;
  H2Counters& counters_;
  ConnList& conns_;
  LaneStarter start_lane_;
  net::any_io_executor ex_;
  nghttp2_session* session_ = nullptr;
  std::unordered_map<int32_t, std::shared_ptr<H2Stream>> streams_;
  std::vector<std::unique_ptr<Lane>> idle_lanes_;
  std::unordered_set<Lane*> busy_lanes_;
  size_t running_ = 0;  // coroutines of streams (Serve, Pump), and the read loop
  Clock::time_point idle_since_ = Clock::now();
  bool writing_ = false;
  bool closing_ = false;
  bool goaway_sent_ = false;
  Signal write_wake_;
  Signal ended_;  // a coroutine of Spawn() ended
  FloodGuard resets_;
  FloodGuard control_;
};

bool H2Connection::Start() {
  nghttp2_session_callbacks* cb = nullptr;
  if (nghttp2_session_callbacks_new(&cb) != 0) return false;
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, OnBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(cb, OnHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, OnFrameRecv);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, OnFrameSend);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, OnDataChunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, OnStreamClose);
  nghttp2_option* opt = nullptr;
  if (nghttp2_option_new(&opt) != 0) {
    nghttp2_session_callbacks_del(cb);
    return false;
  }
  const config::Http2Config& c = settings_.config;
  // Flow control is ours: DATA is acknowledged once it is on the lane.
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_max_continuations(opt, c.max_continuations);
  const int made = nghttp2_session_server_new2(&session_, cb, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
  if (made != 0) return false;
  const nghttp2_settings_entry entries[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, c.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, c.initial_window_bytes},
      {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, c.header_table_bytes},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(settings_.max_header_bytes)},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
  };
  if (nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, entries, std::size(entries)) != 0)
    return false;
  return nghttp2_session_set_local_window_size(
             session_, NGHTTP2_FLAG_NONE, 0, static_cast<int32_t>(c.connection_window_bytes)) == 0;
}

void H2Connection::Spawn(net::awaitable<void> work) {
  ++running_;
  Rearm();
  net::co_spawn(ex_, std::move(work), [this](std::exception_ptr) {
    if (--running_ <= 1) idle_since_ = Clock::now();
    ended_.Notify();
    Rearm();
  });
}

net::awaitable<void> H2Connection::Run(beast::flat_buffer& buffer) {
  if (!Start()) co_return;
  Rearm();
  Spawn(ReadLoop(buffer));
  co_await WriteLoop();
  // The end: every stream's work is stopped (its lane cut), and waited for, as is the read loop.
  closing_ = true;
  beast::error_code ignored;
  conn_.socket.cancel(ignored);
  for (auto& [id, s] : streams_) {
    s->closed = true;
    s->body_wake.Notify();
    s->out_wake.Notify();
  }
  for (Lane* lane : busy_lanes_) lane->conn.socket.cancel(ignored);
  while (running_ > 0) co_await ended_.Wait();
}

net::awaitable<void> H2Connection::ReadLoop(beast::flat_buffer& buffer) {
  for (;;) {
    if (buffer.size() > 0) {
      const auto data = buffer.data();
      const ssize_t n =
          nghttp2_session_mem_recv(session_, static_cast<const uint8_t*>(data.data()), data.size());
      buffer.consume(buffer.size());
      write_wake_.Notify();
      if (n < 0) {
        // A fatal error: nghttp2 has queued a GOAWAY for some, for the others it is ours.
        if (n == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS) {
          Terminate(counters_.flood_headers);
        } else if (n == NGHTTP2_ERR_FLOODED) {
          Terminate(counters_.flood_control);
        } else {
          nghttp2_session_terminate_session(session_, NGHTTP2_PROTOCOL_ERROR);
        }
        break;
      }
    }
    if (closing_ || !nghttp2_session_want_read(session_)) break;
    // An idle connection (no stream served) waits with a small buffer, and holds no larger one.
    const bool idle = running_ <= 1;  // the read loop only
    if (idle) buffer.shrink_to_fit();
    auto [ec, n] =
        co_await conn_.socket.async_read_some(buffer.prepare(idle ? kIdleChunk : kChunk), kTuple);
    if (conn_.Check(ec) == beast::error::timeout) {
      // Idle for the idle timeout: it is told so (GOAWAY NO_ERROR), then closed.
      nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
      break;
    }
    if (ec) {
      closing_ = true;  // the client is gone: nothing more can reach it
      break;
    }
    buffer.commit(n);
  }
  closing_ = closing_ || !nghttp2_session_want_write(session_);
  write_wake_.Notify();
}

net::awaitable<void> H2Connection::WriteLoop() {
  std::string out;
  for (;;) {
    if (settings_.draining.load(std::memory_order_relaxed) && !goaway_sent_) {
      goaway_sent_ = true;
      nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                            nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                            nullptr, 0);
    }
    out.clear();
    while (out.size() < 4 * kChunk) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) co_return;
      if (n == 0) break;
      out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (!out.empty()) {
      writing_ = true;
      const beast::error_code ec =
          co_await WriteAll(conn_, net::buffer(out), settings_.send_timeout);
      writing_ = false;
      Rearm();
      if (ec) co_return;
      if (running_ <= 1) out = std::string();  // idle: no buffer held
      continue;
    }
    if (Finished() || closing_) co_return;
    co_await write_wake_.Wait();
  }
}

int H2Connection::OnBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void* self) {
  auto& c = *static_cast<H2Connection*>(self);
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    if (H2Stream* s = StreamOf(session, frame->hd.stream_id)) s->in_trailers = true;
    return 0;
  }
  c.counters_.streams.fetch_add(1, std::memory_order_relaxed);
  auto s = std::make_shared<H2Stream>(c.ex_, frame->hd.stream_id);
  nghttp2_session_set_stream_user_data(session, s->id, s.get());
  c.streams_.emplace(s->id, std::move(s));
  return 0;
}

int H2Connection::OnHeader(nghttp2_session* session, const nghttp2_frame* frame,
                           const uint8_t* name, size_t name_len, const uint8_t* value,
                           size_t value_len, uint8_t, void* self) {
  auto& c = *static_cast<H2Connection*>(self);
  H2Stream* s = StreamOf(session, frame->hd.stream_id);
  if (!s) return 0;
  s->header_bytes += name_len + value_len + 32;
  ++s->header_fields;
  // A block far past the limit is an attack (an HPACK bomb, a CONTINUATION flood), not a
  // client that overshot: the connection ends.
  if (s->header_bytes > 4 * c.settings_.max_header_bytes) {
    c.Terminate(c.counters_.flood_headers);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  if (s->header_bytes > c.settings_.max_header_bytes ||
      s->header_fields > c.settings_.max_header_fields) {
    s->too_large = true;
  }
  if (s->too_large || s->in_trailers) return 0;
  s->fields.push_back({std::string(reinterpret_cast<const char*>(name), name_len),
                       std::string(reinterpret_cast<const char*>(value), value_len)});
  return 0;
}

bool H2Connection::CountFrame(const nghttp2_frame& frame) {
  const auto now = Clock::now();
  switch (frame.hd.type) {
    case NGHTTP2_RST_STREAM:
      counters_.resets_received.fetch_add(1, std::memory_order_relaxed);
      if (resets_.Count(now)) return true;
      Terminate(counters_.flood_resets);
      return false;
    case NGHTTP2_SETTINGS:
    case NGHTTP2_PING:
      if (frame.hd.flags & NGHTTP2_FLAG_ACK) return true;
      break;
    case NGHTTP2_PRIORITY:
    case NGHTTP2_WINDOW_UPDATE:
      break;
    case NGHTTP2_DATA:
      if (frame.hd.length > 0 || (frame.hd.flags & NGHTTP2_FLAG_END_STREAM)) return true;
      break;
    default:
      return true;
  }
  if (control_.Count(now)) return true;
  Terminate(counters_.flood_control);
  return false;
}

int H2Connection::OnFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* self) {
  auto& c = *static_cast<H2Connection*>(self);
  if (!c.CountFrame(*frame)) return 0;
  H2Stream* s = frame->hd.stream_id ? StreamOf(session, frame->hd.stream_id) : nullptr;
  if (!s) return 0;
  const bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
    s->in_end = end;
    c.HeadersDone(*s);
  } else if (end && (frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS)) {
    s->in_end = true;
    s->body_wake.Notify();
  }
  return 0;
}

void H2Connection::HeadersDone(H2Stream& s) {
  if (s.too_large) {
    Answer(s, 431, "header_too_large", "the request's header list is too large");
    return;
  }
  if (RenderH1Request(s.fields, !s.in_end, s.head, s.request) != H2HeadResult::kOk) {
    counters_.malformed.fetch_add(1, std::memory_order_relaxed);
    Reset(s.id, NGHTTP2_PROTOCOL_ERROR);
    return;
  }
  s.fields = {};
  Spawn(Serve(streams_.at(s.id)));
}

int H2Connection::OnFrameSend(nghttp2_session* session, const nghttp2_frame* frame, void* self) {
  auto& c = *static_cast<H2Connection*>(self);
  if (frame->hd.type == NGHTTP2_GOAWAY) {
    const uint32_t e = frame->goaway.error_code;
    auto& counted = e == NGHTTP2_NO_ERROR            ? c.counters_.goaway_no_error
                    : e == NGHTTP2_PROTOCOL_ERROR    ? c.counters_.goaway_protocol
                    : e == NGHTTP2_ENHANCE_YOUR_CALM ? c.counters_.goaway_calm
                                                     : c.counters_.goaway_other;
    counted.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  // Resets of ours count as the client's do: a client that has us reset its streams (a malformed
  // block, a stalled window) can flood as a client that resets them (CVE-2025-8671).
  if (frame->hd.type == NGHTTP2_RST_STREAM && frame->rst_stream.error_code != NGHTTP2_NO_ERROR &&
      !c.resets_.Count(Clock::now())) {
    c.Terminate(c.counters_.flood_resets);
    return 0;
  }
  // The response ended while the client still sends its request: RFC 9113 8.1 asks for a
  // RST_STREAM with NO_ERROR, so that it stops.
  const bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (end && (frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS)) {
    H2Stream* s = StreamOf(session, frame->hd.stream_id);
    if (s && !s->in_end)
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
  }
  return 0;
}

int H2Connection::OnDataChunk(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* data,
                              size_t len, void*) {
  H2Stream* s = StreamOf(session, id);
  if (!s || s->response_done) {
    // Nobody takes it: acknowledged at once, so that the connection's window stays open.
    nghttp2_session_consume(session, id, len);
    return 0;
  }
  s->in.append(reinterpret_cast<const char*>(data), len);
  s->body_wake.Notify();
  return 0;
}

int H2Connection::OnStreamClose(nghttp2_session* session, int32_t id, uint32_t, void* self) {
  auto& c = *static_cast<H2Connection*>(self);
  const auto it = c.streams_.find(id);
  if (it == c.streams_.end()) return 0;
  H2Stream& s = *it->second;
  s.closed = true;
  // What the pump will not write, the connection's window gets back.
  if (!s.in.empty()) nghttp2_session_consume_connection(session, s.in.size());
  s.in.clear();
  beast::error_code ignored;
  if (s.lane && !s.response_done) s.lane->conn.socket.cancel(ignored);
  s.body_wake.Notify();
  s.out_wake.Notify();
  nghttp2_session_set_stream_user_data(session, id, nullptr);
  c.streams_.erase(it);
  return 0;
}

ssize_t H2Connection::ReadOut(nghttp2_session* session, int32_t id, uint8_t* buf, size_t length,
                              uint32_t* flags, nghttp2_data_source*, void*) {
  H2Stream* s = StreamOf(session, id);
  if (!s) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  const size_t n = std::min(length, s->out.size() - s->out_sent);
  std::memcpy(buf, s->out.data() + s->out_sent, n);
  s->out_sent += n;
  if (s->out_sent == s->out.size()) {
    s->out.clear();
    s->out_sent = 0;
  }
  if (s->out.size() - s->out_sent < kH2OutCap) s->out_wake.Notify();
  if (s->out.empty() && s->out_end) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (!s->trailers.empty()) {
      // The stream ends with the trailers' HEADERS frame instead (nghttp2 copies them).
      std::vector<nghttp2_nv> nv;
      for (const H2Field& f : s->trailers) nv.push_back(Nv(f.name, f.value));
      if (nghttp2_submit_trailer(session, id, nv.data(), nv.size()) == 0)
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
  } else if (n == 0) {
    s->deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  return static_cast<ssize_t>(n);
}

void H2Connection::SubmitResponse(H2Stream& s, int status, std::span<const H2Field> fields,
                                  bool body) {
  const std::string status_text = std::to_string(status);
  std::vector<nghttp2_nv> nv = {Nv(":status", status_text)};
  nv.reserve(fields.size() + 1);
  for (const H2Field& f : fields) nv.push_back(Nv(f.name, f.value));
  nghttp2_data_provider provider{};
  provider.read_callback = ReadOut;
  // nghttp2 copies the fields (NGHTTP2_NV_FLAG_NONE).
  nghttp2_submit_response(session_, s.id, nv.data(), nv.size(), body ? &provider : nullptr);
  write_wake_.Notify();
}

void H2Connection::Answer(H2Stream& s, int status, std::string_view code, std::string_view detail) {
  s.out = contract::ProblemBody(status, code, detail);
  s.out_end = true;
  s.response_done = true;
  const H2Field fields[] = {{"content-type", std::string(contract::kProblemJson)},
                            {"content-length", std::to_string(s.out.size())}};
  SubmitResponse(s, status, fields, true);
}

// Whether an idle lane may serve again: its other side neither closed nor (never) spoke.
bool Usable(Lane& lane) {
  char byte;
  const ssize_t n = ::recv(lane.conn.socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

std::unique_ptr<Lane> H2Connection::TakeLane() {
  while (!idle_lanes_.empty()) {
    std::unique_ptr<Lane> lane = std::move(idle_lanes_.back());
    idle_lanes_.pop_back();
    if (Usable(*lane)) return lane;
  }
  tcp::socket mine(ex_), other(ex_);
  if (!OpenSocketPair(ex_, mine, other) || !start_lane_(std::move(other))) return nullptr;
  return std::make_unique<Lane>(conns_, std::move(mine));
}

void H2Connection::GiveBack(std::unique_ptr<Lane> lane) {
  // A lane holding bytes past its response is not trusted with another.
  if (closing_ || lane->buffer.size() > 0 ||
      idle_lanes_.size() >= settings_.config.max_concurrent_streams)
    return;
  // The oldest idle lane is looked at each time, so lanes that ended idle (their HTTP/1.1 side's
  // keep-alive timed out) are not held until the connection ends.
  if (!idle_lanes_.empty() && !Usable(*idle_lanes_.front())) idle_lanes_.erase(idle_lanes_.begin());
  idle_lanes_.push_back(std::move(lane));
}

net::awaitable<void> H2Connection::Serve(std::shared_ptr<H2Stream> s) {
  if (s->closed) co_return;
  std::unique_ptr<Lane> lane = TakeLane();
  if (!lane) {
    // No room in the client's connection budget (or no descriptor): the client may try again.
    counters_.refused.fetch_add(1, std::memory_order_relaxed);
    Reset(s->id, NGHTTP2_REFUSED_STREAM);
    co_return;
  }
  s->lane = lane.get();
  busy_lanes_.insert(lane.get());
  const bool reusable = co_await RelayOnLane(s, *lane, *this);
  busy_lanes_.erase(lane.get());
  s->lane = nullptr;
  if (reusable) GiveBack(std::move(lane));
  lane.reset();
  // The response, read whole, waits for the client to take it: one that takes nothing for a
  // send timeout (a window left at zero) is reset.
  while (!s->closed && s->out.size() > s->out_sent) {
    if (!co_await s->out_wake.WaitFor(settings_.send_timeout)) {
      Reset(*s);
      break;
    }
  }
}

}  // namespace

net::awaitable<void> ServeHttp2(Conn& conn, beast::flat_buffer& buffer, const H2Settings& settings,
                                H2Counters& counters, ConnList& conns, LaneStarter start_lane) {
  H2Connection c(conn, settings, counters, conns, std::move(start_lane));
  co_await c.Run(buffer);
}

}  // namespace tollgate::http
