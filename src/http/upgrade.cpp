// Upgrades (RFC 9110 7.8, RFC 6455; issue 33): an HTTP/1.1 request that asks to switch to an
// allowed protocol (server.upgrades) is checked (upgrade_head.cpp), decided like any request
// (its route's cost and limits), given its place among the upgraded connections, and forwarded
// with the protocol chosen (forward.cpp). When the upstream answers 101 with that protocol, the
// 101 is relayed and the tunnel (tunnel.hpp) carries the bytes both ways until it ends; the
// upstream connection never goes back to the pool. Any other answer is relayed as it is.
#include "fields.hpp"
#include "relay.hpp"
#include "worker.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace tollgate::http {

std::optional<Step> Exchange::ReadUpgrade(Scratch& scratch, Listener listener) {
  // The decision service decides about requests it never relays; the admin listener relays
  // nothing.
  if (listener != Listener::kGateway) return std::nullopt;
  Worker& w = *w_;
  upgrade = ReadUpgradeAsk(*head, w.gw.server.upgrades);
  if (upgrade.kind != UpgradeAsk::Kind::kInvalid) return std::nullopt;
  w.gw.upgrades.invalid.fetch_add(1, std::memory_order_relaxed);
  // RFC 6455 4.4: the version understood goes with a refused WebSocket handshake.
  return w.ReplyProblem(*this, scratch, bhttp::status::bad_request, "invalid_upgrade",
                        upgrade.detail,
                        upgrade.websocket ? "Sec-WebSocket-Version: 13\r\n" : std::string_view());
}

std::optional<Step> Worker::ReserveUpgrade(Exchange& ex, Scratch& scratch) {
  // The request's own limit scope (a key, an account or a client address), as smoothing's
  // bounds; the client's address on a route without limits.
  const std::string_view identity =
      ex.scopes.primary.empty() ? std::string_view(ex.client) : std::string_view(ex.scopes.primary);
  switch (gw.upgraded.TryReserve(identity)) {
    case IdentityBudget::Refusal::kNone:
      ex.upgrade_place = IdentityBudget::Reservation(gw.upgraded, identity);
      return std::nullopt;
    case IdentityBudget::Refusal::kIdentity:
      gw.upgrades.too_many.fetch_add(1, std::memory_order_relaxed);
      return ReplyProblem(ex, scratch, bhttp::status::too_many_requests, "too_many_upgrades",
                          "this client has as many upgraded connections open as it may "
                          "(server.max_upgraded_per_identity)");
    case IdentityBudget::Refusal::kTotal:
      break;
  }
  gw.upgrades.capacity.fetch_add(1, std::memory_order_relaxed);
  return ReplyProblem(ex, scratch, bhttp::status::service_unavailable, "upgrade_capacity",
                      "the gateway has as many upgraded connections open as it may "
                      "(server.max_upgraded_connections)",
                      "Retry-After: 1\r\n");
}

void Worker::RenderSwitchHead(Exchange& ex, Scratch& scratch, const ResponseParserPtr& rp) {
  ex.log.upstream_status = 101;
  scratch.out.clear();
  util::StringAppender head(scratch.out);
  head << "HTTP/1.1 101 Switching Protocols\r\n";
  // The upstream's end-to-end fields (Sec-WebSocket-Accept, -Protocol, -Extensions...), our
  // rate-limit headers, and the switch in our own words.
  AppendEndToEnd(rp->get(), head,
                 [&scratch](std::string_view name) { return scratch.rate_headers.Has(name); });
  head << scratch.rate_headers.Rendered()
       << "Connection: Upgrade\r\nUpgrade: " << ex.upgrade.protocol << "\r\n\r\n";
}

net::awaitable<bool> Worker::Switch(Conn& stream, beast::flat_buffer& buffer, Scratch& scratch,
                                    UpstreamTry& t, const ResponseParserPtr& rp) {
  Exchange& ex = scratch.exchange;
  const milliseconds send_timeout(gw.server.send_timeout_ms);
  std::string upgrade;  // every Upgrade line of the answer, as one list
  for (const auto& f : rp->get()) {
    if (!util::EqualsIgnoreCase(f.name_string(), "Upgrade")) continue;
    if (!upgrade.empty()) upgrade += ", ";
    upgrade.append(f.value());
  }
  const bool asked = ex.upgrade.kind == UpgradeAsk::Kind::kUpgrade;
  if (const char* bad = CheckSwitch(asked ? ex.upgrade.protocol : std::string_view(), upgrade)) {
    // Nothing of what the upstream sent after its 101 reaches the client: that connection is
    // closed, the client's may stay.
    ReleaseTry(t, false);
    gw.upgrades.upstream_invalid.fetch_add(1, std::memory_order_relaxed);
    ex.upgrade_place.Release();  // counted as upstream_invalid, not not_switched
    ReplyProblem(ex, scratch, bhttp::status::bad_gateway, "upstream_invalid_upgrade", bad,
                 scratch.rate_headers.Rendered());
    co_return co_await Write(stream, scratch.out, ex.reply_keep, send_timeout);
  }
  RenderSwitchHead(ex, scratch, rp);
  Finish(ex, scratch, 101);  // the access line: the request ends here for the log
  // A head the fast parser read is still at the front of `buffer` (Session consumes it after the
  // request); what follows it is the client's first bytes of the new protocol.
  if (!ex.body_parser) buffer.consume(HeadEnd(View(buffer)));
  if (co_await WriteAll(stream, net::buffer(scratch.out), send_timeout)) {
    ReleaseTry(t, false);
    ex.upgrade_place.Release();
    co_return false;
  }
  gw.upgrades.switched.fetch_add(1, std::memory_order_relaxed);
  // The connection leaves the pool for good: its place there is someone else's now, and
  // server.max_upgraded_connections bounds it instead.
  t.claim.Unhold();
  const std::unique_ptr<UpstreamConnection> up = std::move(t.up);
  t.pool->Leave();
  Tunnel::End end;
  {
    const Uncounted not_in_flight(gw.in_flight);  // the drain does not wait for a tunnel
    Tunnel tunnel(tunnels, stream, buffer, up->conn, up->buffer,
                  milliseconds(gw.server.upgrade_idle_timeout_ms),
                  {.to_upstream = gw.upgrades.to_upstream, .to_client = gw.upgrades.to_client});
    end = co_await tunnel.Run();
  }
  gw.upgrades.closed[static_cast<size_t>(end)]->fetch_add(1, std::memory_order_relaxed);
  ex.upgrade_place.Release();
  co_return false;  // the client connection ends with its tunnel
}

}  // namespace tollgate::http
