// The gateway's insides, shared by its rooms: one worker thread (Worker: its listeners,
// connections, upstream pool and caches), and one request's state (Exchange) and buffers
// (Scratch); the process-wide state (Gateway::Impl) is in gateway_impl.hpp. The rooms: worker.cpp
// (accepting, the connection loop), exchange.cpp (a request's steps: identity, decision, answer),
// forward.cpp (the proxy), hold.cpp (smoothing), gateway.cpp (wiring, reload, drain). The
// worker's parts are classes of their own: the key cache, the decision counters, the 429 cache
// and the upstream pool (key_cache.hpp, decision_counters.hpp, rejection_cache.hpp,
// upstream_pool.hpp).
#pragma once

#include "client_body.hpp"
#include "client_share.hpp"
#include "connection_budget.hpp"
#include "decision_counters.hpp"
#include "gateway_impl.hpp"
#include "h2_connection.hpp"
#include "http/tls/peer_certificate.hpp"
#include "key_cache.hpp"
#include "rejection_cache.hpp"
#include "tunnel.hpp"
#include "upgrade_head.hpp"
#include "upstream_pool.hpp"

namespace tollgate::engine {
struct SizeLimits;  // admitter.hpp
}  // namespace tollgate::engine

namespace tollgate::http {

struct ConnectionFacts;  // below
struct LaneFacts;        // worker.cpp

// One worker thread: its event loop, listeners and connections, and the parts it keeps for
// their requests. Not thread-safe: used on its own thread, but for the public members, which
// gateway.cpp sets up before the loop runs and uses to stop it, and which GET /metrics (the
// pool's counts) and GET /admin/top (`top`, itself thread-safe) read from other threads.
class Worker {
 public:
  // Worker `i` of `workers`.
  Worker(Gateway::Impl& g, size_t i, size_t workers);

  // The coroutines gateway.cpp starts on the loop: one per listener, and the sweep of deadlines.
  net::awaitable<void> Accept(tcp::acceptor& acceptor, Listener listener);
  net::awaitable<void> SweepDeadlines();

 private:
  Gateway::Impl& gw;
  size_t index;
  ConnList conns;  // this thread's connections (before ioc: they may outlive its run)
  // What of this thread's pool each client holds (upstream.max_client_share_percent). Before
  // ioc too: the claims of requests still waiting when it stops are given back as it frees them.
  ClientShares client_shares;

 public:
  // This thread's upgraded connections (before ioc too: a tunnel left in its frame when the loop
  // stops leaves the list as the loop is destroyed). gateway.cpp closes them at the drain's end.
  Tunnels tunnels;
  size_t store_lane = 0;  // with a Redis store: this thread's lane of it
  TopOffenders top;       // GET /admin/top and the live page merge every worker's (MergeTop)
  // Only this thread touches its sockets: the reactor needs no lock around their operations.
  net::io_context ioc{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
  // Keep-alive connections to each upstream endpoint, of every group in turn (Gateway::Impl::
  // groups, UpstreamGroup::first_pool): this thread's share of its max_connections, and of its
  // queue_size for requests waiting for one of them. Their counts are gauges.
  std::vector<std::unique_ptr<UpstreamPool>> pools;
  std::optional<tcp::acceptor> acceptor;
  std::optional<tcp::acceptor> admin;
  std::optional<tcp::acceptor> decision;  // the decision service (worker 0 only)
  std::thread thread;

 private:
  // This thread's copy of the policy, refreshed when the generation moves on. A request holds
  // its own reference for its whole life: a reload while it waits must not free what its
  // checks point into.
  std::shared_ptr<const policy::Policy> policy;
  uint64_t generation = 0;
  std::shared_ptr<const policy::Policy> Policy() {
    const uint64_t g = gw.generation.load(std::memory_order_acquire);
    if (g != generation) {
      policy = gw.CurrentPolicy();
      generation = g;
    }
    return policy;
  }

  // The decision counters of this thread's requests (CountDecision).
  DecisionCounters decision_counters{gw.metrics};

  // Presented API keys and what they resolved to under this thread's policy (Identify).
  KeyCache key_cache;

  net::awaitable<void> Session(tcp::socket socket, Listener listener, ConnectionSlot slot);
  // A session's end by an exception (none is thrown on purpose): logged.
  void LogEscaped(std::exception_ptr e);
  // A connection's requests, one after the other (HTTP/1.1), from what `buffer` holds on.
  net::awaitable<void> Serve(Conn& stream, beast::flat_buffer& buffer,
                             const ConnectionFacts& facts);
  // HTTP/2 (issue 34): whether a plaintext connection opens with the client preface (h2c with
  // prior knowledge), read into `buffer`; the connection served as HTTP/2, `counted` in its
  // protocol's connections; and one of its lanes (h2_connection.hpp) served as HTTP/1.1.
  net::awaitable<bool> OpensWithPreface(Conn& stream, beast::flat_buffer& buffer);
  net::awaitable<void> ServeHttp2(Conn& stream, beast::flat_buffer& buffer,
                                  const ConnectionFacts& facts, std::atomic<uint64_t>& counted);
  using LaneSlots = std::pair<ConnectionSlot, ConnectionSlot>;  // one per descriptor
  net::awaitable<void> ServeLane(tcp::socket lane, std::shared_ptr<const LaneFacts> facts,
                                 LaneSlots slots);
  H2Counters h2_counters{gw.metrics};
  // A TLS listener's handshake on `stream`, within its handshake timeout, counted; false when
  // it failed (the connection is then closed). `client_cert`: the client's verified certificate.
  net::awaitable<bool> Handshake(Conn& stream, ListenerTls& tls,
                                 std::optional<tls::PeerCertificate>& client_cert);
  // A head of another shape than ParseRequestHead() takes, or still arriving: Beast's parser.
  net::awaitable<beast::error_code> ReadGeneralHead(Conn& stream, beast::flat_buffer& buffer,
                                                    RequestParser& parser);
  // The answer to a head that could not be read (400, 408, 413, 431) into scratch.out; false
  // when the client just went away.
  bool RenderHeadError(beast::error_code hec, Scratch& scratch);
  // A request's steps are the Exchange's (below); it calls these for what the worker keeps:
  // its caches and counters, and the answers it renders.
  friend class Exchange;
  // Smoothing: holds an allowed request for its delay (ex.verdict.delay), then gives back its
  // reservation (ex.held). A coroutine of its own: only requests that may be held come here.
  net::awaitable<void> Hold(Exchange& ex);
  // Before the decision: reserves room for holding the request when one of its checks smooths,
  // or tells those checks they may not delay (the bounds are reached).
  void ReserveHold(Exchange& ex);
  // Counts and logs the verdict: tollgate_decisions_total, rejections, shadow, degraded.
  void CountDecision(Exchange& ex, const policy::Plan& plan, std::span<const store::Check> cs,
                     std::span<const core::Decision> ds);
  // A rejection (answer.cpp): the last one's bytes again when its facts are the same
  // (contract::AppendRejectionFacts, with the connection's keep-alive and HTTP version).
  Step Reject(Exchange& ex, Scratch& scratch, const contract::AnswerOptions& options);
  RejectionCache last_rejection;
  milliseconds SendTimeout() const { return milliseconds(gw.server.send_timeout_ms); }
  // Whether our answer keeps the connection: the client's wish, its request read whole, and no
  // shutdown under way.
  bool KeepsAlive(const Exchange& ex) const;
  Step Reply(Exchange& ex, Scratch& scratch, bhttp::status status, std::string_view body,
             std::string_view headers = {}, std::string_view type = "application/json");
  Step AdminDeny(Exchange& ex, Scratch& scratch);
  Step AdminTop(Exchange& ex, Scratch& scratch);
  // The admin listener's guard (admin.cpp, issue 31): 421 for a Host not on its allow-list,
  // 401 for a request that changes something without the admin token.
  std::optional<Step> AdminGuardRefusal(Exchange& ex, Scratch& scratch);
  std::optional<Step> AdminTokenRefusal(Exchange& ex, Scratch& scratch);
  // An error of ours: an RFC 9457 problem (contract::ProblemBody) with its stable code.
  Step ReplyProblem(Exchange& ex, Scratch& scratch, bhttp::status status, std::string_view code,
                    std::string_view detail, std::string_view headers = {});
  void Finish(Exchange& ex, Scratch& scratch, int status);  // counts, meters and logs the request
  net::awaitable<bool> Forward(Conn& stream, beast::flat_buffer& buffer, Scratch& scratch);
  // Forward()'s steps (forward.cpp).
  struct UpstreamTry {
    bool request_has_body = false;
    std::unique_ptr<UpstreamConnection> up;
    bool pooled = false;         // taken from the pool (may have been closed under us)
    bool busy = false;           // no connection: the queue was full or the wait too long
    bool over_share = false;     // busy because the client holds its share of the pool
    bool client_failed = false;  // the client's body could not be read
    ClientShares::Claim claim;   // the client's place in client_shares
    // The body read before connecting (BufferBody), whole or its first part, and how the rest
    // is read (its pace and framing).
    std::string_view body;
    ClientBody* client_body = nullptr;
    bool nothing_written = false;
    bool reached_upstream = false;
    size_t head_size = 0;  // of the answer's head in up->buffer
    // The endpoint of this try (issue 33): its pool and settings, and its outstanding count.
    UpstreamPool* pool = nullptr;
    const config::UpstreamConfig* settings = nullptr;
    size_t endpoint = 0;
    Balancer::Lease lease;
  };
  using ResponseParserPtr = std::unique_ptr<bhttp::response_parser<bhttp::buffer_body>>;
  struct ResponseFraming {
    bool upstream_keep_alive = true;
    std::optional<uint64_t> length;
    bool chunked = false;  // sent to the client in chunked encoding
    bool keep = false;     // the client connection stays open
  };
  void RenderForwardHead(Exchange& ex, Scratch& scratch, const GroupEndpoint& to);
  // forward.cpp: the proxy headers tollgate sets (upstream.forwarded_headers, issue 31).
  void AppendProxyHeaders(const Exchange& ex, bool trusted, std::string_view host,
                          const config::UpstreamConfig::ForwardedHeaders& want,
                          util::StringAppender& head);
  // Sets t for endpoint `i` of `group` (its pool, settings and outstanding count) and renders
  // the request's head for it.
  void Aim(Exchange& ex, Scratch& scratch, UpstreamGroup& group, size_t i, UpstreamTry& t);
  // The end of a try at t.endpoint for passive health: `ok` an answer below 500.
  void ReportTry(UpstreamGroup& group, const UpstreamTry& t, bool ok);
  // 503 no_healthy_upstream: every endpoint of the group is out (issue 33).
  void ReplyNoHealthy(Exchange& ex, Scratch& scratch, UpstreamGroup& group);
  static std::string_view ClientIp(const Exchange& ex, bool trusted);
  // The request body, up to server.body_buffer_bytes of it, into `body` before any upstream
  // connection is taken (issue 31: a trickling body held one for as long as it trickled).
  net::awaitable<beast::error_code> BufferBody(Conn& stream, beast::flat_buffer& buffer,
                                               RequestParser& p, std::string& body,
                                               ClientBody& client);
  // Before any upstream connection: the go-ahead of `Expect: 100-continue`, then `client` set up
  // (its pace from then on, a chunked body's framing within server.max_header_bytes and
  // max_header_fields for its trailers) and BufferBody() (answering what it could not read).
  // False when the request ended.
  net::awaitable<bool> ReadBodyFirst(Conn& stream, beast::flat_buffer& buffer, Scratch& scratch,
                                     UpstreamTry& t, std::string& body, ClientBody& client);
  // Starts t.claim for the request's client (upstream.max_client_share_percent).
  void ClaimShare(const Exchange& ex, UpstreamTry& t, const UpstreamGroup& group);
  // The answer to a request body that could not be read, into scratch.out: 413 past
  // server.max_body_bytes, 408 when it came too slowly, 431 for a trailer section past
  // server.max_header_bytes or max_header_fields, 400 when malformed; false when the client
  // just went away.
  bool RenderBodyError(Exchange& ex, Scratch& scratch, beast::error_code ec);
  // Gives t.up back (see UpstreamPool::Release()) and the client's count of it.
  void ReleaseTry(UpstreamTry& t, bool reusable) {
    t.claim.Unhold();
    t.pool->Release(std::move(t.up), reusable);
  }
  net::awaitable<beast::error_code> SendOnce(Conn& stream, beast::flat_buffer& buffer,
                                             Scratch& scratch, UpstreamTry& t);
  // After try number `tries` failed with `ec`: reports it for passive health and aims t at the
  // next try (forward.cpp has the rules); false when there is none. `tried`: the endpoints
  // tried so far.
  bool Retry(Exchange& ex, Scratch& scratch, UpstreamGroup& group, UpstreamTry& t,
             beast::error_code ec, size_t tries, Balancer::Tried& tried);
  net::awaitable<beast::error_code> ReadOtherHead(UpstreamConnection& up, bool is_head,
                                                  milliseconds timeout, ResponseParserPtr& rp);
  void ReplyUpstreamFailure(Exchange& ex, Scratch& scratch, const UpstreamTry& t,
                            beast::error_code ec);
  ResponseFraming RenderResponseHead(Exchange& ex, Scratch& scratch, const SimpleHead* simple,
                                     const ResponseParserPtr& rp);
  // Upgrades (upgrade.cpp, issue 33). Before the decision: the request's place among the
  // upgraded connections (server.max_upgraded_per_identity, max_upgraded_connections), or its
  // refusal (429 too_many_upgrades, 503 upgrade_capacity).
  std::optional<Step> ReserveUpgrade(Exchange& ex, Scratch& scratch);
  // The upstream answered 101 (`rp`): when it switched to the protocol asked, the 101 relayed and
  // the tunnel run until it ends; else 502 upstream_invalid_upgrade. Whether the client
  // connection stays (only after a 502).
  net::awaitable<bool> Switch(Conn& stream, beast::flat_buffer& buffer, Scratch& scratch,
                              UpstreamTry& t, const ResponseParserPtr& rp);
  // The 101 as the client gets it, into scratch.out.
  void RenderSwitchHead(Exchange& ex, Scratch& scratch, const ResponseParserPtr& rp);
  // Any store (the Redis store answers on its own thread). `request` and `decisions` must
  // live until the result is awaited.
  net::awaitable<engine::Verdict> Decide(const engine::Engine::Request& request,
                                         std::span<core::Decision> decisions);
  // GET /admin/usage and GET /v1/usage: renders the reply (a coroutine of its own, as only
  // these requests wait on the usage backend) and says the next step.
  // The usage endpoints and those of Gateway::AddAdminEndpoint: steps that await.
  net::awaitable<Step> ServeUsage(Step step, Conn& stream, beast::flat_buffer& buffer, Exchange& ex,
                                  Scratch& scratch);
  net::awaitable<Step> ServeAdminHook(Conn& stream, beast::flat_buffer& buffer, Exchange& ex,
                                      Scratch& scratch);
  // Their bodies: the status, the body into `body` (and its type).
  net::awaitable<bhttp::status> UsageExport(std::string_view query, std::string& body,
                                            std::string_view& type);
  net::awaitable<bhttp::status> KeyUsage(const policy::Key& key, core::Instant now,
                                         std::string& body);
};

// What the transport knows of a connection (ADR 4), handed to each of its exchanges.
struct ConnectionFacts {
  std::string_view peer;     // the client address, as limits name it
  std::string_view peer_ip;  // the socket's peer address as text
  Listener listener = Listener::kGateway;
  bool tls = false;                                   // the client speaks TLS to us
  const tls::PeerCertificate* client_cert = nullptr;  // its verified certificate (mTLS), if any
};

// One request on its way through the gateway, whatever the transport that carries it (ADR 4):
// its steps, and what it carries from one step to the next. Lives in its connection's Scratch,
// reset by Begin(). The transport (Worker::Session) hands it a request head, then carries out
// the Step each step returns: it writes scratch.out, has the engine decide `request` and calls
// Conclude(), or forwards. The steps that need no waiting are plain functions, which render
// our own responses into scratch.out; only waiting on the store, the usage meter or the
// upstream takes a coroutine, the transport's. Used on its worker's thread only.
class Exchange {
 public:
  // The request `request_head` (and its body, through `request_body` when Beast read the head)
  // on `connection` of worker `w`: the canonical target (or a 400), the built-in endpoints, the
  // identity and checks. What they point into must live as long as the exchange.
  Step Begin(Worker& w, Scratch& scratch, const RequestHead& request_head,
             RequestParser* request_body, const ConnectionFacts& connection);
  // After the decision, in `verdict`: the answer, or Pass().
  Step Conclude(Scratch& scratch);

  Clock::time_point start;
  // Held for the whole request: a reload while it waits must not free what its checks point
  // into. Dropped after it.
  std::shared_ptr<const policy::Policy> policy;
  uint64_t generation = 0;  // the policy's
  const RequestHead* head = nullptr;
  RequestParser* body_parser = nullptr;  // Beast's, when it read the head (and for a body)
  std::string_view peer;                 // the client address of the connection, as limits name it
  std::string_view peer_ip;              // the socket's peer address as text
  bool decision_service = false;
  bool admin = false;                                 // on the admin listener
  bool tls = false;                                   // over TLS: forwarded as https
  const tls::PeerCertificate* client_cert = nullptr;  // the connection's, verified (mTLS)
  // The client's X-Request-Id when sane, else a new one; made when first needed (forwarded or
  // logged: a 429 without an access log has no use for one). See RequestId().
  std::string request_id;
  // Views into the request, which stays as it was read, or into its Scratch: the canonical
  // target (`path`, `query`, and `authority` of an absolute-form target, which becomes the
  // forwarded Host) and every X-Forwarded-For line joined.
  std::string_view method, path, query, authority, forwarded_for, presented;
  std::string_view route_host;  // the host routes meet (policy::RouteHost); empty: none
  size_t upstream = 0;          // the group of the request's route (Gateway::Impl::groups)
  bool has_query = false;
  bool client_keep_alive = false;
  bool reply_keep = false;                            // after Reply()
  const Gateway::AdminHandler* admin_hook = nullptr;  // Step::kAdminHook
  RequestLog log;
  const policy::Key* key = nullptr;
  const policy::Plan* plan = nullptr;
  bool status_endpoint = false;
  bool invalid_key = false;  // deciding on the invalid-key limit of the client's address
  bool cert_route = false;   // the route's identity is the client certificate
  bool held = false;         // holds a reservation of Gateway::Impl::held (smoothing)
  bhttp::status deny_status = bhttp::status::too_many_requests;
  std::string client;
  engine::Scopes scopes;  // the batch's (primary) and those of route and per-address limits
  core::Instant now;
  size_t n_checks = 0;
  std::array<store::Check, kMaxChecks> checks;
  std::array<core::Decision, kMaxChecks> decisions;
  engine::Engine::Request request;
  Clock::time_point decide_start;
  engine::Verdict verdict;
  // The Upgrade the request asks (gateway listener only), and its place among the upgraded
  // connections, held from before the decision to the end of its tunnel, or given back by
  // Worker::Finish() when it was answered otherwise.
  UpgradeAsk upgrade;
  IdentityBudget::Reservation upgrade_place;

  // Whether the request was read in full (its body too): only then is the connection reusable.
  bool RequestRead() const { return !body_parser || body_parser->is_done(); }

 private:
  // Begin's parts. The first two answer only when they end the request.
  std::optional<Step> ReadTarget(Scratch& scratch);
  std::optional<Step> BuiltIn(Scratch& scratch, Listener listener);
  // The request's Upgrade (ReadUpgradeAsk), or 400/426 invalid_upgrade when it is malformed.
  std::optional<Step> ReadUpgrade(Scratch& scratch, Listener listener);
  Step Identify(Scratch& scratch);
  // The routes' own size limits (max_header_bytes, max_body_bytes; the smallest of the routes
  // met): 431 or 413 when over them.
  std::optional<Step> CheckSizes(Scratch& scratch, const engine::SizeLimits& max);
  // Sets cert_route from `route` (the strictest) and `demanded` (the strongest identity of the
  // routes met, engine::RoutesMet); whether a key is required.
  bool Demands(const policy::Route& route, config::RouteIdentity demanded);
  // The key the request presents (`presented`, `key`), or the one its client certificate names;
  // true in that second case.
  bool ReadKey();
  Step Blocked(Scratch& scratch);  // 403 blocked: on a deny list
  // forwarded_for (every X-Forwarded-For line, joined) and client.
  void JoinForwardedFor(Scratch& scratch);
  // The decision service: the original request's method (into `method`), target and Host (for
  // routes with `host:`), from the headers of the configured proxy (decision.proxy: nginx's
  // X-Original-*, Traefik's X-Forwarded-*), believed only from a trusted peer.
  void DescribedRequest(std::string_view& target, std::string_view& host);
  Step Pass(Scratch& scratch);  // allowed: forwarded, or the decision service's 200

  Worker* w_ = nullptr;  // Begin()'s
};

inline bool Worker::KeepsAlive(const Exchange& ex) const {
  return ex.client_keep_alive && ex.RequestRead() && !gw.stopping.load();
}

// The exchange's request id (Exchange::request_id), made on first use.
const std::string& RequestId(Exchange& ex);

// A connection's buffers and its request's state, reused from one request to the next, in
// Session()'s frame: nothing of a request lives in a coroutine frame of its own, which would be
// allocated per request.
struct Scratch {
  alignas(std::max_align_t)
      std::array<std::byte, 2048> arena;  // Beast's fields, when it reads the head
  std::string out;   // what the gateway writes of its own: a response, a forwarded head
  std::string body;  // the body of a response of ours, before `out` is rendered around it
  std::string log_line;
  std::string target;         // the canonical target, when it differs from the request's
  std::string forwarded_for;  // X-Forwarded-For lines joined, when there are several
  HeaderList rate_headers;
  SimpleHead upstream_head;
  RequestHead head;
  Exchange exchange;
  // How a forwarded request's body is read (set by ReadBodyFirst): here rather than in
  // Forward()'s frame, which every forwarded request allocates, bodiless ones too.
  ClientBody client_body;
};

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// RFC 9110 9.2.2: a request that may be sent again when a connection fails under it.
inline bool IsIdempotent(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "OPTIONS" || method == "TRACE" ||
         method == "PUT" || method == "DELETE";
}

// Our own responses (not the upstream's) are rendered whole into one buffer and written with
// one call.
void RenderResponse(std::string& out, bhttp::status status, bool keep_alive, unsigned version,
                    std::string_view content_type, std::string_view headers, std::string_view body);

}  // namespace tollgate::http
