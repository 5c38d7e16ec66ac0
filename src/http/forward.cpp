// The proxy (Step::kForward): the request's head rendered with the canonical target and
// tollgate's own identity headers, its body relayed, the upstream's answer relayed back.
#include <charconv>
#include <cstring>

#include <algorithm>
#include <optional>

#include <tollgate/http/chunked_framing.hpp>

#include "fields.hpp"
#include "relay.hpp"
#include "worker.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace tollgate::http {

namespace {

// The address in one X-Forwarded-For entry, as Policy::ClientAddress reads it, or empty when it
// holds none.
std::string_view EntryAddress(std::string_view entry) {
  const std::string_view text = policy::ForwardedAddressText(entry);
  return !text.empty() && policy::ParseAddress(text) ? text : std::string_view();
}

bool Sent(const RequestHead& req, std::string_view name) {
  return std::any_of(req.fields.begin(), req.fields.end(), [name](const RequestHead::Field& f) {
    return util::EqualsIgnoreCase(f.name, name);
  });
}

}  // namespace

// The client's address as X-Real-IP and Forwarded's for= give it: the peer, or behind a
// trusted proxy the right-most X-Forwarded-For entry that is not one (as Policy::ClientAddress
// walks it, but the address itself, not its /64). Empty when an entry holds no address.
std::string_view Worker::ClientIp(const Exchange& ex, bool trusted) {
  if (!trusted || ex.forwarded_for.empty()) return ex.peer_ip;
  std::string_view list = ex.forwarded_for, last;
  while (!list.empty()) {
    const size_t comma = list.rfind(',');
    const std::string_view entry = comma == std::string_view::npos ? list : list.substr(comma + 1);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(0, comma);
    last = EntryAddress(entry);
    if (last.empty() || !ex.policy->IsTrusted(last)) return last;
  }
  return last;  // every entry a trusted proxy: the left-most
}

// The proxy headers of upstream.forwarded_headers (X-Forwarded-For is the caller's): ours
// alone from an untrusted peer (its own were dropped); behind a trusted proxy, what it sent is
// kept and ours fills in what it did not send. Forwarded gets our element appended.
void Worker::AppendProxyHeaders(const Exchange& ex, bool trusted, std::string_view host,
                                const config::UpstreamConfig::ForwardedHeaders& want,
                                util::StringAppender& head) {
  const RequestHead& req = *ex.head;
  auto ours = [&](bool on, std::string_view name) { return on && !(trusted && Sent(req, name)); };
  const std::string_view proto = ex.tls ? "https" : "http";
  if (ours(want.x_forwarded_proto, "X-Forwarded-Proto"))
    head << "X-Forwarded-Proto: " << proto << "\r\n";
  if (ours(want.x_forwarded_host, "X-Forwarded-Host") && !host.empty()) {
    head << "X-Forwarded-Host: " << host << "\r\n";
  }
  if (ours(want.x_forwarded_port, "X-Forwarded-Port")) {
    const size_t colon = gw.server.listen.rfind(':');
    head << "X-Forwarded-Port: " << std::string_view(gw.server.listen).substr(colon + 1) << "\r\n";
  }
  if (ours(want.x_real_ip, "X-Real-IP")) {
    const std::string_view ip = ClientIp(ex, trusted);
    if (!ip.empty()) head << "X-Real-IP: " << ip << "\r\n";
  }
  if (want.forwarded) {
    // RFC 7239: this hop's element; an IPv6 node and a host with a port are quoted.
    const bool v6 = ex.peer_ip.find(':') != std::string_view::npos;
    head << "Forwarded: for=" << (v6 ? "\"[" : "") << ex.peer_ip << (v6 ? "]\"" : "");
    if (!host.empty()) head << ";host=\"" << host << "\"";
    head << ";proto=" << proto << "\r\n";
  }
}

// Forwards the request to the upstream and relays its response (Step::kForward).
// The request's head as the upstream gets it, into scratch.out: the canonical target (the one
// that was matched and costed, issue 18), the client's end-to-end fields but for those that
// read as tollgate's own, and tollgate's identity headers.
void Worker::RenderForwardHead(Exchange& ex, Scratch& scratch, const GroupEndpoint& to) {
  const RequestHead& req = *ex.head;
  scratch.out.clear();
  util::StringAppender head(scratch.out);
  head << req.method << " ";
  if (ex.path == "*") {
    head << "*";
  } else {
    head << to.target.base_path << ex.path;
  }
  if (ex.has_query) head << "?" << ex.query;
  head << " HTTP/1.1\r\n";
  const bool replace_host = !ex.authority.empty();  // an absolute-form target names the host
  const auto& key_headers = ex.policy->config().identity.api_key_headers;
  const bool trusted = ex.policy->IsTrusted(ex.peer_ip);
  AppendEndToEnd(req, head, [&](std::string_view name) {
    // Proxy headers (who the client is, how it came): a trusted proxy's, as it spelt them;
    // from anyone else, or spelt with '_', never (issue 31).
    if (IsProxyHeader(name) && (!trusted || name.find('_') != std::string_view::npos)) {
      return true;
    }
    // Ours: the whole X-Tollgate- family, X-Forwarded-For and X-Request-Id (the client's, when
    // sane, is forwarded as ours), in any spelling an upstream
    // may read as them ('_' for '-': CGI, WSGI, PHP); and a key header spelt with '_',
    // which tollgate did not read as a key but the upstream might.
    if (ReadsAs(name, "x-tollgate-", true) || ReadsAs(name, "x-forwarded-for") ||
        ReadsAs(name, "x-request-id") || util::EqualsIgnoreCase(name, "Expect") ||
        (replace_host && util::EqualsIgnoreCase(name, "Host"))) {
      return true;
    }
    return name.find('_') != std::string_view::npos &&
           std::any_of(key_headers.begin(), key_headers.end(),
                       [name](const std::string& h) { return ReadsAs(name, h); });
  });
  if (replace_host) {
    head << "Host: " << ex.authority << "\r\n";
  } else if (req.Get("Host").empty() && req.version < 11) {
    // HTTP/1.0 may omit Host; HTTP/1.1, which we send, may not (RFC 9112 3.2).
    head << "Host: " << to.target.authority << "\r\n";
  }
  // The client's list only from a trusted proxy (issue 31: an upstream that reads the left-most
  // entry would believe an untrusted client's own), then the peer's address.
  const std::string_view forwarded_for = trusted ? ex.forwarded_for : std::string_view();
  head << "X-Forwarded-For: " << forwarded_for << (forwarded_for.empty() ? "" : ", ") << ex.peer_ip
       << "\r\nX-Request-Id: " << RequestId(ex) << "\r\n";
  AppendProxyHeaders(ex, trusted, replace_host ? ex.authority : req.Get("Host"),
                     to.config.forwarded_headers, head);
  if (ex.key)
    head << "X-Tollgate-Key-Id: " << ex.key->id << "\r\nX-Tollgate-Plan: " << ex.plan->name
         << "\r\n";
  if (const tls::PeerCertificate* cert = ex.client_cert) {
    // The verified client certificate (mTLS); clients' own X-Tollgate- fields were dropped above.
    head << "X-Tollgate-Client-Cert-Sha256: " << cert->sha256_hex << "\r\n";
    const bool printable = std::all_of(cert->subject.begin(), cert->subject.end(),
                                       [](char c) { return c >= 0x20 && c < 0x7f; });
    if (printable && !cert->subject.empty())
      head << "X-Tollgate-Client-Cert-Subject: " << cert->subject << "\r\n";
  }
  // An upgrade (issue 33): the protocol chosen, alone (the client's Upgrade and Connection are
  // hop-by-hop, dropped above).
  if (ex.upgrade.kind == UpgradeAsk::Kind::kUpgrade)
    head << "Connection: upgrade\r\nUpgrade: " << ex.upgrade.protocol << "\r\n";
  if (req.chunked) {
    head << "Transfer-Encoding: chunked\r\n";
  } else if (req.content_length) {
    head << "Content-Length: " << *req.content_length << "\r\n";
  }
  head << "\r\n";
}

// One try at sending the request on a connection of the pool (or a new one) and reading the
// head of its answer into up->buffer.
net::awaitable<beast::error_code> Worker::SendOnce(Conn& stream, beast::flat_buffer& buffer,
                                                   Scratch& scratch, UpstreamTry& t) {
  Exchange& ex = scratch.exchange;
  beast::error_code ec;
  t.pooled = true;
  // A client that holds its share of the pool waits for none (upstream.max_client_share_percent).
  UpstreamPool& pool = *t.pool;
  if (!t.claim.MayHold(pool.shares().client_connections)) {
    t.busy = t.over_share = true;
    co_return ec;
  }
  t.up = pool.TakeIdle();
  if (!t.up) t.up = co_await pool.Acquire(ec, &t.pooled, &t.busy, t.claim);
  if (!t.up) {
    t.over_share = t.busy && !t.claim.MayHold(pool.shares().client_connections);
    co_return ec;
  }
  t.claim.Hold();
  // The rest of the body keeps the pace from here, with no credit for what came before (issue
  // 31: a body sent fast up to its last byte held a connection for received/rate seconds).
  if (t.client_body) t.client_body->pace.Start();
  const milliseconds timeout(t.settings->timeout_ms);
  bool after_request = false;
  if (t.request_has_body) {
    // The head and the body read so far, in the client's framing (one chunk of it when chunked),
    // then the rest of the body as it comes.
    const bool chunked = ex.head->chunked;
    const bool done = ex.body_parser->is_done();
    static constexpr std::string_view kCrlf = "\r\n", kLastChunk = "0\r\n\r\n";
    char size_line[24];
    std::array<net::const_buffer, 5> bufs;  // empty ones are skipped
    bufs[0] = net::buffer(scratch.out);
    if (!t.body.empty()) {
      if (chunked) {
        const auto r =
            std::to_chars(size_line, size_line + sizeof size_line - 2, t.body.size(), 16);
        std::memcpy(r.ptr, "\r\n", 2);
        bufs[1] = net::buffer(size_line, static_cast<size_t>(r.ptr + 2 - size_line));
        bufs[3] = net::buffer(kCrlf.data(), kCrlf.size());
      }
      bufs[2] = net::buffer(t.body.data(), t.body.size());
    }
    if (done && chunked) bufs[4] = net::buffer(kLastChunk.data(), kLastChunk.size());
    beast::buffers_suffix<decltype(bufs)> rest(bufs);
    ec = WriteNow(t.up->conn.socket, rest);
    if (!ec && beast::buffer_bytes(rest) > 0) ec = co_await WriteRest(t.up->conn, rest, timeout);
    if (!ec && !done) {
      ec = co_await Relay(*ex.body_parser, stream, buffer, t.up->conn, {}, chunked, timeout,
                          timeout, &t.client_failed, t.client_body);
      if (t.client_failed) co_return ec;
    }
  } else {
    // The head alone, most requests: written here, without Relay()'s coroutine.
    beast::buffers_suffix<net::const_buffer> rest(net::buffer(scratch.out));
    ec = WriteNow(t.up->conn.socket, rest);
    t.nothing_written = ec && beast::buffer_bytes(rest) == scratch.out.size();
    if (!ec && beast::buffer_bytes(rest) > 0) {
      ec = co_await WriteRest(t.up->conn, rest, timeout);
    } else {
      // Written in this turn of the event loop, on a connection with nothing unread (a pooled
      // one's last response was read whole): nothing of the answer can be there yet.
      after_request = true;
    }
  }
  t.reached_upstream = true;
  if (!ec) ec = co_await ReadHead(t.up->conn, t.up->buffer, timeout, after_request, &t.head_size);
  co_return ec;
}

// An answer head of another shape than ParseSimpleHead() takes, read by Beast's parser
// (interim 1xx responses are dropped: the client gets the final one; but a 101, after which the
// upstream speaks another protocol).
net::awaitable<beast::error_code> Worker::ReadOtherHead(UpstreamConnection& up, bool is_head,
                                                        milliseconds timeout,
                                                        ResponseParserPtr& rp) {
  beast::error_code ec;
  while (!ec && (!rp || (rp->get().result_int() / 100 == 1 && rp->get().result_int() != 101))) {
    rp = std::make_unique<bhttp::response_parser<bhttp::buffer_body>>();
    rp->header_limit(kMaxUpstreamHead);
    rp->body_limit(boost::none);
    if (is_head) rp->skip(true);
    up.conn.ExpiresAfter(timeout);
    auto [rec, rn] = co_await bhttp::async_read_header(up.conn.socket, up.buffer, *rp, kTuple);
    ec = up.conn.Check(rec);
  }
  co_return ec;
}

net::awaitable<beast::error_code> Worker::BufferBody(Conn& stream, beast::flat_buffer& buffer,
                                                     RequestParser& p, std::string& body,
                                                     ClientBody& client) {
  const size_t most = gw.server.body_buffer_bytes;
  while (!p.is_done() && body.size() < most) {
    const size_t had = body.size();
    const size_t room = std::min(most - had, kRelayChunk);
    body.resize(had + room);
    size_t got = 0;
    const beast::error_code ec =
        co_await ReadBodySome(stream, buffer, p, client, body.data() + had, room, &got);
    body.resize(had + got);
    if (ec) co_return ec;
  }
  co_return beast::error_code{};
}

bool Worker::RenderBodyError(Exchange& ex, Scratch& scratch, beast::error_code ec) {
  if (ec == bhttp::error::body_limit) {
    // A chunked body grew past server.max_body_bytes; nothing was sent to the client yet.
    ReplyProblem(ex, scratch, bhttp::status::payload_too_large, "body_too_large", ec.message());
  } else if (ec == bhttp::error::header_limit) {
    // A chunked body's trailer section past server.max_header_bytes or max_header_fields.
    ReplyProblem(ex, scratch, bhttp::status::request_header_fields_too_large, "header_too_large",
                 "the request's trailer section is too large");
  } else if (ec == beast::error::timeout) {
    ReplyProblem(ex, scratch, bhttp::status::request_timeout, "body_timeout",
                 "the request body did not arrive in time");
  } else if (ec.category() == bhttp::make_error_code(bhttp::error::bad_chunk).category() &&
             ec != bhttp::error::end_of_stream) {
    // Malformed framing (a bad chunk size or line end, a bad trailer), or the body cut short.
    ReplyProblem(ex, scratch, bhttp::status::bad_request, "bad_request", ec.message());
  } else {
    return false;  // the client went away (reset, closed)
  }
  return true;
}

net::awaitable<bool> Worker::ReadBodyFirst(Conn& stream, beast::flat_buffer& buffer,
                                           Scratch& scratch, UpstreamTry& t, std::string& body,
                                           ClientBody& client) {
  Exchange& ex = scratch.exchange;
  const milliseconds send_timeout(gw.server.send_timeout_ms);
  if (util::EqualsIgnoreCase(ex.head->Get("Expect"), "100-continue")) {
    // The client waits for our go-ahead before its body: given now that the limits let the
    // request through, so a rejected request never uploads its body. The upstream sees no Expect.
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    if (co_await WriteAll(stream, net::buffer(kContinue.data(), kContinue.size()), send_timeout))
      co_return false;
  }
  // The body's time counts from here (after the go-ahead: the client waited for it).
  // A chunked body's framing is checked as it arrives, before Beast decodes it: Beast waits for
  // a CRLF after a bare LF (its answer would be a 408 rather than a 400), and for the end of a
  // line or of the trailers with no limit (issue 31: an endless extension or trailer section
  // grew memory by hundreds of MB a second).
  client = ClientBody::Start(ex.body_parser->chunked(), gw.server.max_header_bytes,
                             gw.server.max_header_fields, milliseconds(gw.server.body_timeout_ms),
                             gw.server.min_body_bytes_per_second);
  const beast::error_code ec = co_await BufferBody(stream, buffer, *ex.body_parser, body, client);
  if (ec) {
    if (RenderBodyError(ex, scratch, ec)) co_await Write(stream, scratch.out, false, send_timeout);
    co_return false;
  }
  t.body = body;
  t.client_body = &client;
  co_return true;
}

void Worker::ClaimShare(const Exchange& ex, UpstreamTry& t, const UpstreamGroup& group) {
  if (group.settings().max_client_share_percent >= 100) return;
  // A trusted proxy's own address (a request without X-Forwarded-For) is many clients.
  const bool count_address = !ex.client.empty() && !ex.policy->IsTrusted(ex.client);
  client_shares.Begin(t.claim, count_address ? std::string_view(ex.client) : std::string_view(),
                      ex.key ? std::string_view(ex.key->id) : std::string_view());
}

// The answer when no upstream answer came: 503 upstream_busy, 504 or 502.
void Worker::ReplyUpstreamFailure(Exchange& ex, Scratch& scratch, const UpstreamTry& t,
                                  beast::error_code ec) {
  if (t.busy) {
    gw.upstream_busy.fetch_add(1, std::memory_order_relaxed);
    scratch.rate_headers.Add("Retry-After", 1);
    ReplyProblem(ex, scratch, bhttp::status::service_unavailable, "upstream_busy",
                 t.over_share ? "this client holds its share of the upstream connections"
                              : "every upstream connection is busy; try again",
                 scratch.rate_headers.Rendered());
    return;
  }
  const bool timeout = ec == beast::error::timeout;
  // An https:// upstream whose handshake failed (its certificate not verified, above all).
  const bool tls = !timeout && tls_ops::IsTlsError(ec);
  const char* kind = timeout              ? "timeout"
                     : tls                ? "tls"
                     : t.reached_upstream ? "protocol"
                                          : "connect";
  gw.metrics.Counter("tollgate_upstream_errors_total", std::string("kind=\"") + kind + "\"")
      .fetch_add(1, std::memory_order_relaxed);
  ReplyProblem(ex, scratch, timeout ? bhttp::status::gateway_timeout : bhttp::status::bad_gateway,
               timeout ? "upstream_timeout"
               : tls   ? "upstream_tls_failed"
                       : "upstream_unavailable",
               tls ? "the TLS handshake with the upstream failed"  // its reason is not the client's
               : ec ? ec.message()
                    : "no upstream connection",
               scratch.rate_headers.Rendered());
}

// The answer's head as the client gets it, into scratch.out: our rate-limit headers in place
// of any of the same name, and framing for the body we send: the upstream's length, else
// chunked (HTTP/1.0 clients: the body runs to the connection's close).
Worker::ResponseFraming Worker::RenderResponseHead(Exchange& ex, Scratch& scratch,
                                                   const SimpleHead* simple,
                                                   const ResponseParserPtr& rp) {
  const RequestHead& req = *ex.head;
  const auto skip = [&scratch](std::string_view name) { return scratch.rate_headers.Has(name); };
  const unsigned status = simple ? simple->status : rp->get().result_int();
  ResponseFraming f;
  f.upstream_keep_alive = simple ? simple->keep_alive : rp->get().keep_alive();
  f.length = simple ? simple->content_length : std::nullopt;
  if (!simple && rp->content_length()) f.length = *rp->content_length();
  const bool unframed = !simple && !f.length && !rp->is_done();
  f.chunked = unframed && req.version >= 11;
  f.keep =
      ex.client_keep_alive && ex.RequestRead() && !gw.stopping.load() && !(unframed && !f.chunked);
  ex.log.upstream_status = static_cast<int>(status);
  scratch.out.clear();
  util::StringAppender head(scratch.out);
  head << "HTTP/1.1 " << status << " "
       << (simple ? simple->reason : std::string_view(rp->get().reason())) << "\r\n";
  if (simple) {
    for (size_t i = 0; i < simple->line_count; ++i) {
      const SimpleHead::Line& l = simple->lines[i];
      if (!skip(l.text.substr(0, l.name_size))) head << l.text << "\r\n";
    }
  } else {
    AppendEndToEnd(rp->get(), head, skip);
  }
  head << scratch.rate_headers.Rendered();
  if (f.length) {
    head << "Content-Length: " << *f.length << "\r\n";
  } else if (f.chunked) {
    head << "Transfer-Encoding: chunked\r\n";
  }
  if (!f.keep) {
    head << "Connection: close\r\n";
  } else if (req.version < 11) {
    head << "Connection: keep-alive\r\n";
  }
  head << "\r\n";
  return f;
}

void Worker::Aim(Exchange& ex, Scratch& scratch, UpstreamGroup& group, size_t i, UpstreamTry& t) {
  const GroupEndpoint& to = group.endpoints[i];
  // The head names the endpoint only when a request without Host gets the endpoint's.
  if (!t.pool || (ex.head->Get("Host").empty() && ex.authority.empty()))
    RenderForwardHead(ex, scratch, to);
  t.pool = pools[group.first_pool + i].get();
  t.settings = &to.config;
  t.endpoint = i;
  t.lease = Balancer::Lease(group.balancer, i);
  t.up.reset();
  t.busy = t.over_share = t.nothing_written = t.reached_upstream = false;
}

void Worker::ReportTry(UpstreamGroup& group, const UpstreamTry& t, bool ok) {
  if (!group.balancer.Report(t.endpoint, ok, BalancerNow())) return;
  gw.log.Error("{\"level\":\"warn\",\"msg\":\"upstream endpoint ejected\",\"group\":\"" +
               JsonEscape(group.config.name) + "\",\"endpoint\":\"" +
               JsonEscape(group.endpoints[t.endpoint].config.url) + "\",\"ejected_ms\":" +
               std::to_string(group.balancer.Read(t.endpoint, BalancerNow()).ejected_for_ms) + "}");
}

void Worker::ReplyNoHealthy(Exchange& ex, Scratch& scratch, UpstreamGroup& group) {
  group.no_healthy->fetch_add(1, std::memory_order_relaxed);
  const int64_t ms =
      group.balancer.MsUntilAdmission(BalancerNow(), group.config.active.interval_ms);
  scratch.rate_headers.Add("Retry-After", std::max<int64_t>(1, (ms + 999) / 1000));
  ReplyProblem(ex, scratch, bhttp::status::service_unavailable, "no_healthy_upstream",
               "every endpoint of upstream group '" + group.config.name + "' is ejected",
               scratch.rate_headers.Rendered());
}

// A retry when a try fails before any response byte: on a pooled connection (it may have been
// closed under us), for a request without a body (it cannot be read from the client twice) that
// is idempotent or of which nothing was written (the upstream may have executed a POST that got
// no answer); and, in a group of several endpoints, after a failed connect (nothing was sent).
// It goes to an endpoint not tried yet when one is admitted (issue 33), else, after a pooled
// connection's failure, to the same one on a fresh connection. At most 2 tries, 3 in a group
// of 3 endpoints or more.
bool Worker::Retry(Exchange& ex, Scratch& scratch, UpstreamGroup& group, UpstreamTry& t,
                   beast::error_code ec, size_t tries, Balancer::Tried& tried) {
  const bool connect_failed = !t.up;
  if (t.up) ReleaseTry(t, false);
  // A pooled connection that failed (but for a timeout) was most likely closed while idle: no
  // sign of the endpoint's health.
  if (!t.pooled || ec == beast::error::timeout) ReportTry(group, t, false);
  const bool may_retry = connect_failed
                             ? group.endpoints.size() > 1
                             : t.pooled && !t.request_has_body && ec != beast::error::timeout &&
                                   (IsIdempotent(ex.head->method) || t.nothing_written);
  if (!may_retry || tries >= std::clamp<size_t>(group.endpoints.size(), 2, 3)) return false;
  tried |= Balancer::Tried{1} << t.endpoint;
  const std::optional<size_t> next = group.balancer.Pick(BalancerNow(), tried);
  if (!next && connect_failed) return false;
  gw.upstream_retries.fetch_add(1, std::memory_order_relaxed);
  Aim(ex, scratch, group, next.value_or(t.endpoint), t);
  return true;
}

net::awaitable<bool> Worker::Forward(Conn& stream, beast::flat_buffer& buffer, Scratch& scratch) {
  Exchange& ex = scratch.exchange;
  const RequestHead& req = *ex.head;
  UpstreamGroup& group = *gw.groups[ex.upstream < gw.groups.size() ? ex.upstream : 0];
  const milliseconds send_timeout(gw.server.send_timeout_ms);
  std::optional<size_t> at = group.balancer.Pick(BalancerNow());
  if (!at) {
    // Answered at once, before the body is read: no endpoint would take it.
    ReplyNoHealthy(ex, scratch, group);
    co_return co_await Write(stream, scratch.out, ex.reply_keep, send_timeout);
  }
  UpstreamTry t{.request_has_body = !ex.RequestRead()};
  Aim(ex, scratch, group, *at, t);
  std::string body;  // what ReadBodyFirst() read
  if (t.request_has_body) {
    if (!co_await ReadBodyFirst(stream, buffer, scratch, t, body, scratch.client_body)) {
      co_return false;
    }
  }
  ClaimShare(ex, t, group);
  const bool is_head = req.method == "HEAD";
  beast::error_code ec;
  const auto t_up = Clock::now();
  Balancer::Tried tried = 0;
  for (size_t tries = 1;; ++tries) {
    ec = co_await SendOnce(stream, buffer, scratch, t);
    if (t.client_failed) {
      ReleaseTry(t, false);
      // Past the part read before connecting: too much, too slow or malformed; or gone.
      if (RenderBodyError(ex, scratch, ec))
        co_await Write(stream, scratch.out, false, send_timeout);
      co_return false;
    }
    if (t.busy || !ec || !Retry(ex, scratch, group, t, ec, tries, tried)) break;
  }
  const SimpleHead* simple = nullptr;
  ResponseParserPtr rp;  // heads of other shapes
  if (t.up && !ec) {
    if (ParseSimpleHead(View(t.up->buffer).substr(0, t.head_size), is_head,
                        scratch.upstream_head)) {
      simple = &scratch.upstream_head;
    } else {
      ec = co_await ReadOtherHead(*t.up, is_head, milliseconds(t.settings->timeout_ms), rp);
    }
    if (ec) {
      ReleaseTry(t, false);
      ReportTry(group, t, false);
    }
  }
  if (t.busy || !t.up || ec) {
    ReplyUpstreamFailure(ex, scratch, t, ec);
    co_return co_await Write(stream, scratch.out, ex.reply_keep, send_timeout);
  }
  gw.upstream_latency.Observe(SecondsSince(t_up));
  if (rp && rp->get().result_int() == 101)
    co_return co_await Switch(stream, buffer, scratch, t, rp);
  const ResponseFraming f = RenderResponseHead(ex, scratch, simple, rp);
  ReportTry(group, t, ex.log.upstream_status < 500);
  const milliseconds timeout(t.settings->timeout_ms);
  bool upstream_failed = false;
  if (simple) {
    t.up->buffer.consume(simple->size);
    // Each write to the client within server.send_timeout_ms: one that stops reading is cut off
    // and gives its upstream connection back (issue 31).
    ec = co_await RelayLength(t.up->conn, t.up->buffer, stream, scratch.out,
                              is_head ? 0 : f.length.value_or(0), timeout, send_timeout,
                              &upstream_failed);
  } else {
    ec = co_await Relay(*rp, t.up->conn, t.up->buffer, stream, scratch.out, f.chunked, timeout,
                        send_timeout, &upstream_failed);
  }
  Finish(ex, scratch, ex.log.upstream_status);
  // Bytes past the response would be read as the next one's: such a connection is not reused.
  // Nor is one that carried a body with a method that gives a body no meaning (GET, HEAD,
  // DELETE, OPTIONS, TRACE: RFC 9110 9.3): an upstream that ignores it may read it as another
  // request and answer that later, after the connection went back to the pool (issue 18).
  const bool ignorable_body = t.request_has_body && IsIdempotent(req.method) && req.method != "PUT";
  const bool reusable = !ec && f.upstream_keep_alive && (simple || rp->is_done()) &&
                        t.up->buffer.size() == 0 && !ignorable_body;
  ReleaseTry(t, reusable);
  co_return !ec && f.keep;
}

}  // namespace tollgate::http
