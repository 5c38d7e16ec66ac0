// A client's request body as the gateway reads it: the pace it must keep (BodyPace), its chunked
// framing checked before Beast's parser sees a byte of it, and a bound on what may wait in the
// connection's buffer meanwhile (issue 31). Used by the forwarder, before and after an upstream
// connection is taken.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <tollgate/http/chunked_framing.hpp>

#include "conn.hpp"

namespace tollgate::http {

// When the next bytes of a client's request body are due (issue 31: a body sent a byte every
// 0.3 s held an upstream connection for as long as it trickled; one sent fast and then stalled
// held one for body_timeout + received/rate, hours for a large body). A token bucket of time:
// each byte received moves the deadline on by 1/bytes_per_second, but never past `grace` from
// now. So no gap between two reads is longer than `grace`, and over any stretch of time T the
// body brings at least (T - grace) * bytes_per_second bytes; a fast upload of any size passes.
// Not thread-safe; owned by one request.
struct BodyPace {
  milliseconds grace{0};
  uint64_t bytes_per_second = 1;
  Clock::time_point due{};

  // From `now` on (the end of the head, the 100 Continue, or taking an upstream connection:
  // the time spent waiting for one is not the client's, nor does what came before earn any).
  void Start(Clock::time_point now = Clock::now()) { due = now + grace; }
  void Received(uint64_t bytes, Clock::time_point now = Clock::now()) {
    const auto credit = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
        static_cast<double>(bytes) / static_cast<double>(bytes_per_second)));
    due = std::min(due + credit, now + grace);
  }
  // The time left for the next read, from `now` (zero when the body is already late).
  Clock::duration Left(Clock::time_point now = Clock::now()) const {
    return std::max(Clock::duration::zero(), due - now);
  }
};

// What reading one request body keeps from one read to the next. Not thread-safe; owned by one
// request.
struct ClientBody {
  BodyPace pace;
  std::optional<ChunkedFraming> framing;  // a chunked body's, until its end
  size_t scanned = 0;       // bytes at the start of the connection's buffer the framing has seen
  size_t max_buffered = 0;  // the most the connection's buffer may hold while the body is read

  // A body's reading, its pace started now: a chunked body's framing with its trailer section
  // held to the head's limits (server.max_header_bytes, max_header_fields); the buffer bounded
  // by what Beast's parser may hold while it waits for a line's end (a size line or the trailer
  // section, which the framing bounds) and what one read brings.
  static ClientBody Start(bool chunked, size_t max_header_bytes, size_t max_header_fields,
                          milliseconds grace, uint64_t bytes_per_second) {
    ClientBody b{.pace = {.grace = grace, .bytes_per_second = bytes_per_second}};
    b.pace.Start();
    if (chunked) {
      b.framing.emplace(
          ChunkedLimits{.trailer_bytes = max_header_bytes, .trailer_fields = max_header_fields});
    }
    b.max_buffered = max_header_bytes + ChunkedLimits{}.line_bytes + 2 * 16 * 1024;
    return b;
  }
};

// Decoded body bytes, up to `room` of them, into `data` (`*got` of them): returns once some are
// there, the body is done, or an error: bhttp::error::bad_chunk for framing ChunkedFraming
// refuses, header_limit for a trailer section past its limits, buffer_overflow when the buffer
// would grow past `b.max_buffered` (which the framing's limits keep it under), timeout when the
// pace is not kept, partial_message when the client closed. Every byte is scanned before Beast's
// parser `p` sees it.
template <class Parser>
net::awaitable<beast::error_code> ReadBodySome(Conn& in, beast::flat_buffer& buf, Parser& p,
                                               ClientBody& b, char* data, size_t room,
                                               size_t* got) {
  namespace bhttp = boost::beast::http;
  constexpr size_t kReadSize = 16 * 1024;
  *got = 0;
  beast::error_code ec;
  for (;;) {
    if (b.framing && b.scanned < buf.size()) {
      const std::string_view bytes(static_cast<const char*>(buf.data().data()), buf.size());
      size_t used = 0;
      const auto r = b.framing->Scan(bytes.substr(b.scanned), &used);
      if (r == ChunkedFraming::Result::kBad) co_return bhttp::error::bad_chunk;
      if (r == ChunkedFraming::Result::kTooLarge) co_return bhttp::error::header_limit;
      b.scanned = r == ChunkedFraming::Result::kDone ? b.scanned + used : buf.size();
      if (r == ChunkedFraming::Result::kDone) b.framing.reset();
    }
    p.get().body().data = data + *got;
    p.get().body().size = room - *got;
    const size_t taken = buf.size() == 0 ? 0 : p.put(buf.data(), ec);
    buf.consume(taken);
    b.scanned -= std::min(b.scanned, taken);
    const size_t n = room - *got - p.get().body().size;
    *got += n;
    if (n > 0) b.pace.Received(n);
    if (ec == bhttp::error::need_buffer) co_return beast::error_code{};  // `room` is full
    if (ec && ec != bhttp::error::need_more) co_return ec;
    ec = {};
    if (p.is_done() || *got == room) co_return beast::error_code{};
    if (taken > 0) continue;
    if (*got > 0) co_return beast::error_code{};  // what came, before waiting for more
    if (buf.size() >= b.max_buffered) co_return bhttp::error::buffer_overflow;
    in.ExpiresAfter(b.pace.Left());
    auto [rec, r] = co_await in.socket.async_read_some(
        buf.prepare(std::min(kReadSize, b.max_buffered - buf.size())), kTuple);
    if (rec == net::error::eof) {
      p.put_eof(ec);  // a body cut short: partial_message
      co_return ec ? ec : beast::error_code(bhttp::error::partial_message);
    }
    if (rec) co_return in.Check(rec);
    buf.commit(r);
  }
}

}  // namespace tollgate::http
