// An HTTP/2 connection of the gateway listener (issue 34): libnghttp2's server session over the
// connection's stream (TCP for h2c, TLS for h2), and its streams. Included by worker.cpp only
// (Asio; nghttp2 stays in h2_connection.cpp).
//
// Each stream is one request through the exchange, as the HTTP/1.1 request it means
// (RenderH1Request), on a lane: one end of an in-process socket pair whose other end the worker
// serves as one more HTTP/1.1 connection of this client's (docs/adr/0005). A lane serves one
// stream at a time and is kept for the next while its HTTP/1.1 side keeps it alive. Bodies move
// under flow control both ways: a request's DATA is acknowledged (WINDOW_UPDATE) only once written
// to the lane, and a response is read from the lane only while the client takes it.
#pragma once

#include <atomic>
#include <functional>

#include <tollgate/config/config.hpp>
#include <tollgate/metrics/metrics.hpp>

#include "conn.hpp"

namespace tollgate::http {

// The gateway's HTTP/2 counters (tollgate_http2_*), shared by its workers.
struct H2Counters {
  explicit H2Counters(metrics::Registry& m);
  std::atomic<uint64_t>& connections_h2;   // tollgate_http2_connections_total{protocol="h2"}
  std::atomic<uint64_t>& connections_h2c;  // {protocol="h2c"}
  std::atomic<uint64_t>& streams;          // tollgate_http2_streams_total
  std::atomic<uint64_t>& resets_received;  // tollgate_http2_resets_received_total
  // tollgate_http2_floods_total{kind=}: connections ended for a flood.
  std::atomic<uint64_t>& flood_resets;     // rapid reset
  std::atomic<uint64_t>& flood_control;    // control frames
  std::atomic<uint64_t>& flood_headers;    // a header block past 4x server.max_header_bytes
  std::atomic<uint64_t>& malformed;        // tollgate_http2_malformed_total: streams reset
  std::atomic<uint64_t>& refused;          // tollgate_http2_refused_streams_total
  std::atomic<uint64_t>& goaway_no_error;  // tollgate_http2_goaways_sent_total{error=}
  std::atomic<uint64_t>& goaway_protocol;
  std::atomic<uint64_t>& goaway_calm;  // ENHANCE_YOUR_CALM
  std::atomic<uint64_t>& goaway_other;
};

struct H2Settings {
  const config::Http2Config& config;
  size_t max_header_bytes;            // server.max_header_bytes: the header list of a stream
  size_t max_header_fields;           // server.max_header_fields
  milliseconds idle_timeout;          // no stream open
  milliseconds send_timeout;          // a write to the client
  const std::atomic<bool>& draining;  // SIGTERM: GOAWAY to new streams
};

// Starts serving `lane` (one end of a socket pair) as an HTTP/1.1 connection of this client's;
// false when the client's connection budget has no room for it (a lane holds a place in
// server.max_connections and max_connections_per_address, as its two descriptors are as dear as a
// connection's), and then the stream is refused.
using LaneStarter = std::function<bool(tcp::socket lane)>;

// Serves `conn` as HTTP/2 from its first byte; `buffer` holds what was read of it already (the
// preface, on h2c). Returns once the connection and every stream of it are done.
net::awaitable<void> ServeHttp2(Conn& conn, beast::flat_buffer& buffer, const H2Settings& settings,
                                H2Counters& counters, ConnList& conns, LaneStarter start_lane);

// The client preface of HTTP/2 (RFC 9113 3.4), what h2c with prior knowledge opens with.
inline constexpr std::string_view kH2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

}  // namespace tollgate::http
