#include "h2_stream.hpp"

#include <charconv>
#include <cstring>

#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>

#include <tollgate/util/ascii.hpp>

#include "relay.hpp"

// GCC 12 and Asio's recycling allocator for coroutine frames: see worker.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace tollgate::http {

namespace {

namespace bhttp = boost::beast::http;
using ResponseParser = bhttp::response_parser<bhttp::buffer_body>;

constexpr size_t kChunk = 16 * 1024;         // read from a lane at a time
constexpr size_t kMaxGrpcAnswer = 8 * 1024;  // of a non-gRPC answer read for its message

void CrossResponseHead(const ResponseParser::value_type& m, std::vector<H2Field>& storage) {
  const std::string_view connection = m[bhttp::field::connection];
  for (const auto& f : m) {
    if (!CrossesToH2(f.name_string(), connection)) continue;
    storage.push_back({util::AsciiLower(f.name_string()), std::string(f.value())});
  }
}

// A chunked response's trailer fields (after the first `head_fields` of `m`), as HTTP/2 takes
// them: not a connection's own, nor framing.
void TakeTrailers(const ResponseParser::value_type& m, size_t head_fields,
                  std::vector<H2Field>& out) {
  size_t i = 0;
  for (const auto& f : m) {
    if (i++ < head_fields || !CrossesToH2(f.name_string(), "") ||
        util::EqualsIgnoreCase(f.name_string(), "content-length"))
      continue;
    out.push_back({util::AsciiLower(f.name_string()), std::string(f.value())});
  }
}

// The message of a non-gRPC answer: its problem's code and detail, else its status.
std::string GrpcText(int status, std::string_view body) {
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(body, ec);
  if (!ec && v.is_object()) {
    const auto& o = v.get_object();
    const auto* code = o.if_contains("code");
    const auto* detail = o.if_contains("detail");
    if (code && code->is_string()) {
      std::string text(code->get_string());
      if (detail && detail->is_string()) text.append(": ").append(detail->get_string());
      return text;
    }
  }
  return "HTTP status " + std::to_string(status);
}

net::awaitable<void> Pump(std::shared_ptr<H2Stream> s, Lane& lane, H2StreamPort& port) {
  std::string data = std::move(s->head);
  // What is being written: DATA arriving meanwhile goes to s->in, which may move it.
  std::string writing;
  char size_line[24];
  for (;;) {
    writing.clear();
    writing.swap(s->in);
    const size_t body = writing.size();
    const bool last = s->in_end;
    std::array<net::const_buffer, 5> bufs;
    bufs[0] = net::buffer(data);
    if (body > 0) {
      if (s->request.chunked) {
        const auto r = std::to_chars(size_line, size_line + sizeof size_line - 2, body, 16);
        std::memcpy(r.ptr, "\r\n", 2);
        bufs[1] = net::buffer(size_line, static_cast<size_t>(r.ptr + 2 - size_line));
        bufs[3] = net::buffer("\r\n", 2);
      }
      bufs[2] = net::buffer(writing);
    }
    if (last && s->request.chunked) bufs[4] = net::buffer("0\r\n\r\n", 5);
    if (net::buffer_size(bufs) > 0) {
      const beast::error_code ec = co_await WriteAll(lane.conn, bufs, port.SendTimeout());
      lane.conn.Disarm();
      // Written or not, the bytes are off the connection's window (its stream's, if it is open).
      if (body > 0) port.Consumed(*s, body);
      if (ec || s->closed) {
        s->pump_failed = true;
        break;
      }
    }
    data.clear();
    if (last && s->in.empty()) break;
    while (s->in.empty() && !s->in_end && !s->closed && !s->response_done)
      co_await s->body_wake.Wait();
    if (s->closed || (s->response_done && !s->in_end)) {
      s->pump_failed = true;
      break;
    }
  }
  s->pump_running = false;
  s->out_wake.Notify();
}

// Reads the body of `p` from `lane` into `chunk` (kChunk bytes); the bytes read, or an error.
net::awaitable<beast::error_code> ReadSome(Lane& lane, ResponseParser& p, char* chunk, size_t& n) {
  p.get().body().data = chunk;
  p.get().body().size = kChunk;
  auto [ec, r] = co_await bhttp::async_read(lane.conn.socket, lane.buffer, p, kTuple);
  if (ec == bhttp::error::need_buffer) ec = {};
  n = kChunk - p.get().body().size;
  co_return ec;
}

// A gRPC client reads no HTTP error: an answer that is not gRPC's (ours, or a plain HTTP
// upstream's) becomes gRPC's Trailers-Only response (HTTP 200, one HEADERS frame with
// grpc-status and grpc-message), its rate-limit fields kept.
net::awaitable<bool> RespondGrpc(H2Stream& s, Lane& lane, ResponseParser& p, H2StreamPort& port) {
  std::string body;
  auto chunk = std::make_unique_for_overwrite<char[]>(kChunk);
  while (!p.is_done() && body.size() < kMaxGrpcAnswer) {
    size_t n = 0;
    const beast::error_code ec = co_await ReadSome(lane, p, chunk.get(), n);
    if (ec || s.closed) break;
    body.append(chunk.get(), n);
  }
  if (s.closed) co_return false;
  const auto& m = p.get();
  const int status = m.result_int();
  std::vector<H2Field> fields = {
      {"content-type", "application/grpc"},
      {"grpc-status", std::to_string(status >= 200 && status < 300 ? 2 : GrpcStatusOf(status))},
      {"grpc-message", GrpcMessage(GrpcText(status, body))}};
  std::vector<H2Field> crossed;
  CrossResponseHead(m, crossed);
  for (H2Field& f : crossed) {
    if (f.name != "content-type" && f.name != "content-length") fields.push_back(std::move(f));
  }
  s.out_end = true;
  port.SubmitResponse(s, 200, fields, false);
  co_return p.is_done() && p.keep_alive();
}

net::awaitable<bool> Respond(H2Stream& s, Lane& lane, H2StreamPort& port) {
  ResponseParser p;
  p.header_limit(static_cast<uint32_t>(kMaxUpstreamHead));
  p.body_limit(boost::none);
  if (s.request.method == "HEAD") p.skip(true);
  auto [hec, hn] = co_await bhttp::async_read_header(lane.conn.socket, lane.buffer, p, kTuple);
  if (hec || s.closed) {
    if (!s.closed) port.Reset(s);
    co_return false;
  }
  const auto& m = p.get();
  if (s.request.grpc && !m[bhttp::field::content_type].starts_with("application/grpc"))
    co_return co_await RespondGrpc(s, lane, p, port);
  std::vector<H2Field> fields;
  CrossResponseHead(m, fields);
  const size_t head_fields = CountFields(m);
  s.out_end = p.is_done();
  port.SubmitResponse(s, m.result_int(), fields, !p.is_done());
  auto chunk = std::make_unique_for_overwrite<char[]>(kChunk);
  while (!p.is_done()) {
    // The client takes the response at its pace: no more is read while it holds kH2OutCap.
    // One that takes nothing for a send timeout (a window left at zero) is reset, as an
    // HTTP/1.1 client is cut off when a write to it does not complete in time.
    while (s.out.size() - s.out_sent >= kH2OutCap && !s.closed) {
      if (!co_await s.out_wake.WaitFor(port.SendTimeout())) {
        port.Reset(s);
        co_return false;
      }
    }
    if (s.closed) co_return false;
    size_t n = 0;
    const beast::error_code ec = co_await ReadSome(lane, p, chunk.get(), n);
    if (ec || s.closed) {
      if (!s.closed) port.Reset(s);
      co_return false;
    }
    s.out.erase(0, s.out_sent);  // what the client took
    s.out_sent = 0;
    s.out.append(chunk.get(), n);
    if (p.is_done()) TakeTrailers(m, head_fields, s.trailers);
    s.out_end = p.is_done();
    port.MoreOut(s);
  }
  co_return p.keep_alive();
}

}  // namespace

net::awaitable<bool> RelayOnLane(std::shared_ptr<H2Stream> s, Lane& lane, H2StreamPort& port) {
  if (!s->in_end || !s->in.empty()) {
    // The head goes with the body, in one coroutine: the two are written in order.
    s->pump_running = true;
    port.Spawn(Pump(s, lane, port));
  } else {
    const beast::error_code ec =
        co_await WriteAll(lane.conn, net::buffer(s->head), port.SendTimeout());
    lane.conn.Disarm();
    if (ec) {
      if (!s->closed) port.Reset(*s);
      co_return false;
    }
  }
  const bool answered = co_await Respond(*s, lane, port);
  s->response_done = true;
  s->body_wake.Notify();
  while (s->pump_running) co_await s->out_wake.Wait();
  co_return answered && !s->pump_failed && !s->closed;
}

}  // namespace tollgate::http
