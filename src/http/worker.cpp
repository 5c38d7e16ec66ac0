// Accepting connections, their budgets, and the connection loop: read a head, run the
// request's steps (exchange.cpp), write the answer or forward (forward.cpp).
#include <boost/asio/co_spawn.hpp>

#include "relay.hpp"
#include "worker.hpp"

// GCC 12 inlines Asio's recycling allocator for coroutine frames (aligned_alloc, released with
// free through aligned_delete) and then reports the pair as mismatched: a false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace tollgate::http {

namespace {

// The socket's peer address as text; empty when the socket has none (the peer already gone).
std::string PeerAddress(const tcp::socket& socket) {
  beast::error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  return ec ? std::string() : remote.address().to_string();
}

// A head Beast's parser read, as a RequestHead of views into its message.
void HeadFromBeast(const RequestParser& p, RequestHead& head) {
  const auto& m = p.get();
  head.Clear();
  head.method = m.method_string();
  head.target = m.target();
  head.version = m.version();
  head.keep_alive = m.keep_alive();
  head.chunked = p.chunked();
  if (const auto n = p.content_length()) head.content_length = *n;
  for (const auto& f : m) head.fields.push_back({f.name_string(), f.value()});
}

}  // namespace

Worker::Worker(Gateway::Impl& g, size_t i, size_t workers) : gw(g), index(i) {
  for (const auto& group : g.groups) {
    for (const GroupEndpoint& e : group->endpoints) {
      pools.push_back(std::make_unique<UpstreamPool>(
          ioc, conns,
          UpstreamPool::Options{.shares = UpstreamPool::SharesOf(e.config, workers),
                                .endpoint = e.target.endpoint,
                                .connect_timeout = milliseconds(e.config.connect_timeout_ms),
                                .queue_timeout = milliseconds(e.config.queue_timeout_ms),
                                .start_tls = e.tls ? std::function<bool(Stream&)>(
                                                         [&t = *e.tls, h2 = e.config.http2](
                                                             Stream& s) { return t.Start(s, h2); })
                                                   : nullptr,
                                .http2 = e.config.http2,
                                .write_timeout = milliseconds(e.config.timeout_ms)},
          g.upstream_stale));
    }
  }
}

net::awaitable<void> Worker::Accept(tcp::acceptor& a, Listener listener) {
  const bool admin_listener = listener == Listener::kAdmin;
  const char* const listener_name = admin_listener                    ? "admin"
                                    : listener == Listener::kDecision ? "decision"
                                                                      : "gateway";
  auto refused = [&](const char* reason) -> std::atomic<uint64_t>& {
    return gw.metrics.Counter(
        "tollgate_connections_refused_total",
        std::string("listener=\"") + listener_name + "\",reason=\"" + reason + "\"");
  };
  std::atomic<uint64_t>& refused_total = refused("max_connections");
  std::atomic<uint64_t>& refused_address = refused("per_address");
  net::steady_timer backoff(ioc);
  for (;;) {
    auto [ec, socket] = co_await a.async_accept(kTuple);
    if (ec) {
      if (ec == net::error::operation_aborted || !a.is_open()) co_return;
      gw.accept_errors.fetch_add(1, std::memory_order_relaxed);
      // Out of descriptors or buffers: accepting again at once fails again at once (a busy loop
      // that starves every connection). Wait for connections to end.
      if (ec == net::error::no_descriptors || ec == net::error::no_buffer_space ||
          ec == net::error::no_memory || ec == boost::system::errc::too_many_files_open_in_system) {
        backoff.expires_after(kAcceptBackoff);
        co_await backoff.async_wait(kTuple);
      }
      continue;
    }
    beast::error_code ignored;
    ConnectionSlot slot;
    ConnectionBudget& budget = admin_listener ? gw.admin_connections : gw.connections;
    if (!budget.TakeTotal(slot)) {
      refused_total.fetch_add(1, std::memory_order_relaxed);
      socket.close(ignored);
      continue;
    }
    if (budget.LimitsAddresses()) {
      std::string address = PeerAddress(socket);
      if (!Policy()->IsTrusted(address) && !budget.TakeAddress(slot, std::move(address))) {
        refused_address.fetch_add(1, std::memory_order_relaxed);
        socket.close(ignored);
        continue;
      }
    }
    socket.set_option(tcp::no_delay(true), ignored);
    socket.non_blocking(true, ignored);  // for WriteAll's first attempt
    net::co_spawn(ioc, Session(std::move(socket), listener, std::move(slot)),
                  [this](std::exception_ptr e) { LogEscaped(e); });
  }
}

void Worker::LogEscaped(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    gw.log.Error(std::string("{\"level\":\"error\",\"msg\":\"session failed\",\"error\":\"") +
                 JsonEscape(ex.what()) + "\"}");
  }
}

net::awaitable<void> Worker::SweepDeadlines() {
  net::steady_timer timer(ioc);
  conns.swept_at = Clock::now();  // the worker's construction may be a while ago
  for (;;) {
    timer.expires_after(kSweepInterval);
    auto [ec] = co_await timer.async_wait(kTuple);
    if (ec) co_return;
    Conn::Sweep(conns, Clock::now());
  }
}

// The head, parsed from the bytes already read, reading more only while the parser needs them
// (Beast's async_read_header costs a trip through the executor even when the whole head is
// already here).
net::awaitable<beast::error_code> Worker::ReadGeneralHead(Conn& stream, beast::flat_buffer& buffer,
                                                          RequestParser& parser) {
  beast::error_code hec;
  // Beast's header limit holds for one put() only, and put() takes each whole field line as it
  // comes: a head sent in pieces could grow without bound (issue 31: 50,000 empty fields passed
  // a 16 KB limit). Every byte of the head counts, its line ends too: those put() took, and
  // those still waiting in `buffer`. (Beast's own limit stays as it is: lowered between calls,
  // its scan for the end of the head can wait for bytes that never come.)
  const size_t limit = gw.server.max_header_bytes;
  size_t taken = 0;
  for (;;) {
    const size_t used = parser.put(buffer.data(), hec);
    buffer.consume(used);
    taken += used;
    if (hec == bhttp::error::need_more) {
      hec = {};
      if (taken + buffer.size() >= limit) {
        hec = bhttp::error::header_limit;
        break;
      }
    } else if (hec || parser.is_header_done()) {
      // Every field counts, empty ones too (RFC 9110 5.4: a server may refuse too many). The
      // fast parser leaves heads of more to this one.
      const auto& m = parser.get();
      if (!hec && (taken > limit || static_cast<size_t>(std::distance(m.begin(), m.end())) >
                                        gw.server.max_header_fields))
        hec = bhttp::error::header_limit;
      break;
    }
    auto [rec, n] = co_await stream.socket.async_read_some(buffer.prepare(4096), kTuple);
    if (rec == net::error::eof) {
      // A head cut short is malformed; a connection closed between requests is not.
      if (parser.got_some()) {
        parser.put_eof(hec);
      } else {
        hec = bhttp::error::end_of_stream;
      }
      break;
    }
    hec = stream.Check(rec);
    if (hec) break;
    buffer.commit(n);
  }
  co_return hec;
}

bool Worker::RenderHeadError(beast::error_code hec, Scratch& scratch) {
  bhttp::status status = bhttp::status::bad_request;
  std::string code = "bad_request";
  if (hec == bhttp::error::header_limit) {
    status = bhttp::status::request_header_fields_too_large;
    code = "header_too_large";
  } else if (hec == bhttp::error::body_limit) {
    // A Content-Length above server.max_body_bytes is refused before any byte of the body.
    status = bhttp::status::payload_too_large;
    code = "body_too_large";
  } else if (hec == beast::error::timeout) {
    status = bhttp::status::request_timeout;
    code = "header_timeout";
  } else if (hec == bhttp::error::end_of_stream || hec == net::error::eof ||
             hec == net::error::connection_reset) {
    return false;  // the client went away between requests
  }
  RenderResponse(scratch.out, status, false, 11, contract::kProblemJson, {},
                 ProblemBody(static_cast<int>(status), code, hec.message()));
  gw.requests_by_class[2]->fetch_add(1, std::memory_order_relaxed);
  return true;
}

net::awaitable<bool> Worker::Handshake(Conn& stream, ListenerTls& tls,
                                       std::optional<tls::PeerCertificate>& client_cert) {
  if (!stream.socket.StartTls(tls.native())) {
    tls.handshakes_failed.fetch_add(1, std::memory_order_relaxed);
    co_return false;
  }
  stream.ExpiresAfter(tls.handshake_timeout());
  auto [hec] = co_await stream.socket.async_handshake(kTuple);
  hec = stream.Check(hec);
  auto& counted = !hec                           ? tls.handshakes_ok
                  : hec == beast::error::timeout ? tls.handshakes_timeout
                                                 : tls.handshakes_failed;
  counted.fetch_add(1, std::memory_order_relaxed);
  if (!hec) client_cert = tls::VerifiedPeerCertificate(stream.socket.ssl());
  co_return !hec;
}

net::awaitable<void> Worker::Session(tcp::socket socket, Listener listener, ConnectionSlot slot) {
  Conn stream(conns, std::move(socket));
  stream.socket.DrainedReads(true);             // see socket.hpp
  const ConnectionSlot held = std::move(slot);  // released when the connection ends
  const std::string peer_ip = PeerAddress(stream.socket);
  // Normalised once (an IPv4-mapped peer becomes IPv4): the client address without XFF.
  const std::string peer = peer_ip.empty() ? "" : Policy()->ClientAddress(peer_ip, {});
  ListenerTls* const tls = gw.TlsOf(listener);
  std::optional<tls::PeerCertificate> cert;
  if (tls && !co_await Handshake(stream, *tls, cert)) co_return;  // closed with `stream`
  const ConnectionFacts facts{peer, peer_ip, listener, tls != nullptr, cert ? &*cert : nullptr};
  beast::flat_buffer buffer;
  const config::Http2Config& h2 = gw.server.http2;
  const bool gateway = listener == Listener::kGateway;
  if (gateway && tls && h2.enabled && stream.socket.Alpn() == "h2") {
    co_await ServeHttp2(stream, buffer, facts, h2_counters.connections_h2);
  } else if (gateway && !tls && h2.h2c && co_await OpensWithPreface(stream, buffer)) {
    co_await ServeHttp2(stream, buffer, facts, h2_counters.connections_h2c);
  } else {
    co_await Serve(stream, buffer, facts);
  }
  beast::error_code ec;
  stream.socket.CloseNotify();
  stream.socket.shutdown(tcp::socket::shutdown_send, ec);
  stream.socket.close(ec);
}

net::awaitable<bool> Worker::OpensWithPreface(Conn& stream, beast::flat_buffer& buffer) {
  for (;;) {
    const std::string_view got = View(buffer);
    if (got.size() >= kH2Preface.size()) co_return got.starts_with(kH2Preface);
    if (!kH2Preface.starts_with(got)) co_return false;
    // Nothing yet: the idle timeout, as for a keep-alive connection; a head begun: its own.
    stream.ExpiresAfter(
        milliseconds(got.empty() ? gw.server.idle_timeout_ms : gw.server.header_timeout_ms));
    auto [rec, n] = co_await stream.socket.async_read_some(buffer.prepare(4096), kTuple);
    if (rec) co_return false;  // the loop reads nothing more either
    buffer.commit(n);
  }
}

// What a lane's HTTP/1.1 connection knows of its HTTP/2 one: its own copy, as a lane may
// outlive the stream that opened it.
struct LaneFacts {
  std::string peer, peer_ip;
  std::optional<tls::PeerCertificate> cert;
  ConnectionFacts facts;
};

net::awaitable<void> Worker::ServeHttp2(Conn& stream, beast::flat_buffer& buffer,
                                        const ConnectionFacts& facts,
                                        std::atomic<uint64_t>& counted) {
  counted.fetch_add(1, std::memory_order_relaxed);
  auto shared = std::make_shared<LaneFacts>(
      LaneFacts{std::string(facts.peer), std::string(facts.peer_ip),
                facts.client_cert ? std::optional(*facts.client_cert) : std::nullopt, facts});
  shared->facts.peer = shared->peer;
  shared->facts.peer_ip = shared->peer_ip;
  shared->facts.client_cert = shared->cert ? &*shared->cert : nullptr;
  const H2Settings settings{.config = gw.server.http2,
                            .max_header_bytes = gw.server.max_header_bytes,
                            .max_header_fields = gw.server.max_header_fields,
                            .idle_timeout = milliseconds(gw.server.idle_timeout_ms),
                            .send_timeout = SendTimeout(),
                            .draining = gw.draining};
  // A lane's two descriptors take two places in max_connections, and one among its address's.
  auto start_lane = [this, shared](tcp::socket lane) {
    LaneSlots slots;
    ConnectionBudget& budget = gw.connections;
    if (!budget.TakeTotal(slots.first) || !budget.TakeTotal(slots.second)) return false;
    if (budget.LimitsAddresses() && !Policy()->IsTrusted(shared->peer_ip) &&
        !budget.TakeAddress(slots.first, shared->peer_ip))
      return false;
    net::co_spawn(ioc, ServeLane(std::move(lane), shared, std::move(slots)),
                  [this](std::exception_ptr e) { LogEscaped(e); });
    return true;
  };
  co_await tollgate::http::ServeHttp2(stream, buffer, settings, h2_counters, conns, start_lane);
}

net::awaitable<void> Worker::ServeLane(tcp::socket lane, std::shared_ptr<const LaneFacts> facts,
                                       LaneSlots slots) {
  const LaneSlots held = std::move(slots);  // released when the lane ends
  Conn stream(conns, std::move(lane));
  beast::flat_buffer buffer;
  co_await Serve(stream, buffer, facts->facts);
  beast::error_code ec;
  stream.socket.close(ec);
}

net::awaitable<void> Worker::Serve(Conn& stream, beast::flat_buffer& buffer,
                                   const ConnectionFacts& facts) {
  Scratch scratch;
  std::pmr::monotonic_buffer_resource fields_arena(scratch.arena.data(), scratch.arena.size(),
                                                   std::pmr::new_delete_resource());
  for (;;) {
    if (buffer.size() == 0) {
      // Keep-alive: wait for the next request's first bytes.
      stream.ExpiresAfter(milliseconds(gw.server.idle_timeout_ms));
      auto [rec, n] = co_await stream.socket.async_read_some(buffer.prepare(4096), kTuple);
      if (rec) break;
      buffer.commit(n);
    }
    // Most heads arrive whole and have the common shape: they are parsed in place, in the
    // buffer, which keeps them until the request is done. The others, and heads still arriving,
    // go to Beast's parser, whose message then fills the same RequestHead.
    RequestHead& head = scratch.head;
    size_t fast_size = 0;
    const bool fast = ParseRequestHead(View(buffer), gw.server.max_header_bytes, head, &fast_size,
                                       gw.server.max_header_fields) == HeadParse::kComplete;
    std::optional<RequestParser> parser;  // the general one, and a body's
    beast::error_code hec;
    if (!fast) {
      fields_arena.release();  // the last request's parser is gone
      parser.emplace(std::piecewise_construct, std::make_tuple(),
                     std::make_tuple(RequestAllocator(&fields_arena)));
      parser->header_limit(static_cast<uint32_t>(gw.server.max_header_bytes));
      parser->body_limit(gw.server.max_body_bytes);
      stream.ExpiresAfter(milliseconds(gw.server.header_timeout_ms));
      hec = co_await ReadGeneralHead(stream, buffer, *parser);
      if (!hec) HeadFromBeast(*parser, head);
    }
    if (hec) {
      if (RenderHeadError(hec, scratch)) co_await Write(stream, scratch.out, false, SendTimeout());
      break;
    }
    bool keep = false;
    {
      const Counted in_flight(gw.in_flight);  // SIGTERM's drain waits for these
      // The request's steps (Exchange), here rather than in a coroutine of their own: a request
      // answered by us with the memory store allocates no coroutine frame.
      Exchange& ex = scratch.exchange;
      Step step = ex.Begin(*this, scratch, head, parser ? &*parser : nullptr, facts);
      if (step == Step::kAdminUsage || step == Step::kKeyUsage || step == Step::kAdminHook) {
        step = co_await ServeUsage(step, stream, buffer, ex, scratch);
      } else if (step == Step::kDecide) {
        // Not `?:`: GCC 12 also runs a co_await in the arm not chosen (decided twice).
        const std::span<core::Decision> decisions{ex.decisions.data(), ex.n_checks};
        if (gw.engine->DecidesAtOnce()) ex.verdict = gw.engine->DecideNow(ex.request, decisions);
        if (!gw.engine->DecidesAtOnce()) ex.verdict = co_await Decide(ex.request, decisions);
        step = ex.Conclude(scratch);
        if (ex.held) co_await Hold(ex);
      }
      if (step == Step::kForward) {
        keep = co_await Forward(stream, buffer, scratch);
      } else {
        beast::buffers_suffix<net::const_buffer> rest(net::buffer(scratch.out));
        beast::error_code wec = WriteNow(stream.socket, rest);
        if (!wec && beast::buffer_bytes(rest) > 0)
          wec = co_await WriteRest(stream, rest, SendTimeout());
        keep = !wec && ex.reply_keep;
      }
      ex.policy.reset();
      if (fast) buffer.consume(fast_size);  // the head was read in place
    }
    if (!keep || gw.draining.load()) break;
  }
}

net::awaitable<engine::Verdict> Worker::Decide(const engine::Engine::Request& request,
                                               std::span<core::Decision> decisions) {
  return Await<engine::Verdict>([this, &request, decisions](auto resume) {
    gw.engine->Decide(request, decisions, std::move(resume));
  });
}

}  // namespace tollgate::http
