// One request's steps (Exchange, see worker.hpp): the canonical target, identity and checks, the
// decision's answer (contract/), the built-in endpoints, and the access log line.
#include <algorithm>
#include <charconv>
#include <random>

#include <tollgate/core/calendar.hpp>
#include <tollgate/engine/admitter.hpp>
#include <tollgate/util/clock.hpp>
#include <tollgate/util/query.hpp>

#include "access_line.hpp"
#include "endpoints.hpp"
#include "fields.hpp"
#include "ui_assets.hpp"
#include "worker.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace tollgate::http {

using util::CanonicalizeTarget;
using util::CanonicalTarget;

// Our own responses (not the upstream's) are rendered whole into one buffer and written with
// one call.
void RenderResponse(std::string& out, bhttp::status status, bool keep_alive, unsigned version,
                    std::string_view content_type, std::string_view headers,
                    std::string_view body) {
  out.clear();
  util::StringAppender text(out);
  text << "HTTP/1.1 " << static_cast<unsigned>(status) << " " << bhttp::obsolete_reason(status)
       << "\r\nServer: tollgate\r\nContent-Type: " << content_type
       << "\r\nContent-Length: " << body.size() << "\r\n";
  if (!keep_alive) {
    text << "Connection: close\r\n";
  } else if (version < 11) {
    text << "Connection: keep-alive\r\n";
  }
  text << headers << "\r\n" << body;
}

net::awaitable<Step> Worker::ServeUsage(Step step, Conn& stream, beast::flat_buffer& buffer,
                                        Exchange& ex, Scratch& scratch) {
  if (step == Step::kAdminHook) co_return co_await ServeAdminHook(stream, buffer, ex, scratch);
  std::string_view type = "application/json";
  bhttp::status status;  // not `?:` with a co_await in an arm (GCC 12: see Session)
  if (step == Step::kAdminUsage) {
    status = co_await UsageExport(ex.query, scratch.body, type);
  } else {
    status = co_await KeyUsage(*ex.key, ex.now, scratch.body);
  }
  if (static_cast<int>(status) >= 400) type = contract::kProblemJson;
  co_return Reply(ex, scratch, status, scratch.body, {}, type);
}

// Billing export: tollgate usage --period 2026-11 [--account ID] --format csv|json.
net::awaitable<bhttp::status> Worker::UsageExport(std::string_view query, std::string& body,
                                                  std::string_view& type) {
  const std::string period = util::QueryValue(query, "period").value_or("");
  const std::string format = util::QueryValue(query, "format").value_or("");
  const std::string account = util::QueryValue(query, "account").value_or("");
  auto records = co_await Await<core::Result<std::vector<usage::UsageRecord>>>(
      [this, &period, &account](auto resume) {
        gw.meter->Query(period, account, std::move(resume));
      });
  if (!records) {
    body = ProblemBody(400, "invalid_period", records.error());
    co_return bhttp::status::bad_request;
  }
  if (format == "json") {
    body = usage::UsageJson(*records);
  } else {
    body = usage::UsageCsv(*records);
    type = "text/csv";
  }
  co_return bhttp::status::ok;
}

// The caller's metered usage today and this month (UTC).
net::awaitable<bhttp::status> Worker::KeyUsage(const policy::Key& key, core::Instant now,
                                               std::string& body) {
  std::array<UsagePeriod, 2> periods{
      UsagePeriod{"day", core::PeriodLabel(core::Period::kDay, now), {}},
      UsagePeriod{"month", core::PeriodLabel(core::Period::kMonth, now), {}}};
  for (UsagePeriod& p : periods) {
    auto records = co_await Await<core::Result<std::vector<usage::UsageRecord>>>(
        [this, &p, &key](auto resume) {
          gw.meter->Query(p.period, key.account, std::move(resume));
        });
    if (!records) {
      body = ProblemBody(503, "usage_unavailable", records.error());
      co_return bhttp::status::service_unavailable;
    }
    p.records = std::move(*records);
  }
  body = KeyUsageBody(key, periods);
  co_return bhttp::status::ok;
}

const std::string& RequestId(Exchange& ex) {
  std::string& id = ex.request_id;
  if (!id.empty()) return id;
  // The client's when it is sane (1 to 128 of letters, digits and ._:/+=@-), else 32 hex digits.
  const std::string_view incoming = ex.head->Get("X-Request-Id");
  const bool sane =
      !incoming.empty() && incoming.size() <= 128 &&
      std::all_of(incoming.begin(), incoming.end(), [](unsigned char c) {
        return std::isalnum(c) ||
               std::string_view("._:/+=@-").find(static_cast<char>(c)) != std::string_view::npos;
      });
  if (sane) return id.assign(incoming);
  thread_local std::mt19937_64 random{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  id.resize(32);
  for (size_t i = 0; i < 32; i += 16) {
    uint64_t r = random();
    for (size_t j = 0; j < 16; ++j, r >>= 4) id[i + j] = kHex[r & 15];
  }
  return id;
}

void Worker::Finish(Exchange& ex, Scratch& scratch, int status) {
  if (ex.upgrade_place.held() && status != 101) {
    // Asked, and answered otherwise: the limiter's 429, the upstream's refusal or failure.
    gw.upgrades.not_switched.fetch_add(1, std::memory_order_relaxed);
    ex.upgrade_place.Release();
  }
  gw.requests_by_class[static_cast<size_t>(std::clamp(status / 100, 2, 5) - 2)]->fetch_add(
      1, std::memory_order_relaxed);
  const RequestLog& rlog = ex.log;
  using contract::LogDecision;
  const bool rejected = contract::IsRejection(rlog.decision);
  const std::string_view client = ex.client.empty() ? ex.peer : std::string_view(ex.client);
  if (gw.server.top_offenders &&
      (rejected || rlog.decision == LogDecision::kAllowed ||
       rlog.decision == LogDecision::kShadowRejected || rlog.decision == LogDecision::kDegraded ||
       rlog.decision == LogDecision::kLocalAllowed)) {
    top.Record(rejected, rlog.key_id, client, ex.now.unix_micros() / 1'000'000);
  }
  if (ex.key && rlog.metered) {
    gw.meter->Record(ex.key->account, ex.key->id, OutcomeOf(status, rejected), rlog.cost, ex.now,
                     usage::MeterTag{ex.key, ex.generation});
  }
  if (!gw.server.access_log) return;
  // Built in a buffer of the connection.
  std::string& line = scratch.log_line;
  RenderAccessLine(
      line, rlog,
      {.method = ex.method,
       .path = ex.path,
       .query = ex.query,
       .status = status,
       .client = client,
       .peer = ex.peer,
       .request_id = RequestId(ex),
       .latency_us =
           std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - ex.start).count(),
       .decided_us = ex.now.unix_micros()});
  gw.log.Access(line);
}

Step Worker::Reply(Exchange& ex, Scratch& scratch, bhttp::status status, std::string_view body,
                   std::string_view headers, std::string_view type) {
  ex.reply_keep = KeepsAlive(ex);
  RenderResponse(scratch.out, status, ex.reply_keep, ex.head->version, type, headers, body);
  Finish(ex, scratch, static_cast<int>(status));
  return Step::kReply;
}

Step Worker::ReplyProblem(Exchange& ex, Scratch& scratch, bhttp::status status,
                          std::string_view code, std::string_view detail,
                          std::string_view headers) {
  return Reply(ex, scratch, status, ProblemBody(static_cast<int>(status), code, detail), headers,
               contract::kProblemJson);
}

Step Exchange::Begin(Worker& w, Scratch& scratch, const RequestHead& request_head,
                     RequestParser* request_body, const ConnectionFacts& connection) {
  const Listener listener = connection.listener;
  w_ = &w;
  if (w.gw.server.access_log) start = Clock::now();  // for the line's latency_ms alone
  policy = w.Policy();
  generation = w.generation;
  head = &request_head;
  body_parser = request_body;
  peer = connection.peer;
  peer_ip = connection.peer_ip;
  tls = connection.tls;
  client_cert = connection.client_cert;
  log = {};
  key = nullptr;
  plan = nullptr;
  n_checks = 0;
  invalid_key = false;
  held = false;
  status_endpoint = false;
  presented = forwarded_for = authority = route_host = {};
  scratch.rate_headers.Clear();
  decision_service = listener == Listener::kDecision;
  client.clear();
  request_id.clear();
  admin = listener == Listener::kAdmin;
  client_keep_alive = request_head.keep_alive;
  upgrade = {};
  upgrade_place.Release();
  if (auto refused = ReadTarget(scratch)) return *refused;
  if (auto answered = BuiltIn(scratch, listener)) return *answered;
  if (auto refused = ReadUpgrade(scratch, listener)) return *refused;
  return Identify(scratch);
}

std::optional<Step> Exchange::ReadTarget(Scratch& scratch) {
  Worker& w = *w_;
  Gateway::Impl& gw = w.gw;
  // The request stays as it was read for the whole exchange (the forwarded head is rendered
  // apart), so views into it stay valid. The decision service decides about the original
  // request, which the proxy in front describes in headers.
  std::string_view target = head->target;
  method = head->method;
  path = target;  // for the log line of a refusal
  query = {};
  std::string_view described_host;  // the original request's Host, from a trusted proxy
  if (decision_service) DescribedRequest(target, described_host);

  // Framing and Host first (RFC 9112), then one canonical target for everything after:
  // routes, cost, the log and the forwarded request line (issue 18).
  std::string_view host;
  const char* bad = CheckRequestHead(*head, &host);
  const char* detail = bad ? "see docs/http-contract.md" : nullptr;
  CanonicalTarget canonical;
  if (!bad) {
    const config::TargetConfig& tc =
        decision_service ? gw.decision.request_target : gw.server.request_target;
    detail = CanonicalizeTarget(method, target,
                                {.allow_encoded_slash = tc.allow_encoded_slash,
                                 .allow_path_parameters = tc.allow_path_parameters},
                                scratch.target, canonical);
    if (detail) bad = "invalid_request_target";
  }
  if (bad) {
    gw.metrics.Counter("tollgate_bad_requests_total", std::string("code=\"") + bad + "\"")
        .fetch_add(1, std::memory_order_relaxed);
    client_keep_alive = false;  // what follows on the connection cannot be trusted to be framed
    return w.ReplyProblem(*this, scratch, bhttp::status::bad_request, bad, detail);
  }
  path = canonical.path;
  query = canonical.query;
  has_query = canonical.has_query;
  authority = canonical.authority;
  // Virtual hosts (issue 33): routes meet the host the upstream gets (an absolute-form target's
  // authority replaces Host), in a spelling no upstream reads as another name.
  if (!policy->HasHostRoutes()) return std::nullopt;
  const std::optional<std::string_view> named =
      policy::RouteHost(!described_host.empty() ? described_host
                        : authority.empty()     ? host
                                                : authority);
  route_host = named.value_or(std::string_view());
  if (!named) {
    gw.metrics.Counter("tollgate_bad_requests_total", "code=\"invalid_host\"")
        .fetch_add(1, std::memory_order_relaxed);
    client_keep_alive = false;
    return w.ReplyProblem(*this, scratch, bhttp::status::bad_request, "invalid_host",
                          "the host is no plain name: routes choose by host");
  }
  return std::nullopt;
}

std::optional<Step> Exchange::BuiltIn(Scratch& scratch, Listener listener) {
  Worker& w = *w_;
  Gateway::Impl& gw = w.gw;
  if (decision_service) return std::nullopt;  // it decides every request it gets
  // The built-in endpoints: all on the admin listener, those of server.public_endpoints on the
  // gateway listener (the others are the upstream's paths there).
  const auto& pub = gw.server.public_endpoints;
  if (admin) {
    if (auto refused = w.AdminGuardRefusal(*this, scratch)) return refused;
  }
  if (method == "GET" && (admin || pub.health)) {
    if (path == "/healthz")
      return w.Reply(*this, scratch, bhttp::status::ok, "{\"status\":\"ok\"}");
    if (path == "/readyz") {
      const std::string_view why = gw.Readiness();
      return why.empty() ? w.Reply(*this, scratch, bhttp::status::ok, "{\"status\":\"ready\"}")
                         : w.Reply(*this, scratch, bhttp::status::service_unavailable,
                                   "{\"status\":\"" + std::string(why) + "\"}");
    }
  }
  if (method == "GET" && path == "/metrics" && (admin || pub.metrics)) {
    return w.Reply(*this, scratch, bhttp::status::ok, gw.metrics.Render(), {},
                   "text/plain; version=0.0.4");
  }
  if (listener == Listener::kAdmin) {
    const std::string_view refused =
        AdminBrowserRefusal(head->Get("Host"), head->Get("Origin"), head->Get("Sec-Fetch-Site"));
    if (!refused.empty()) {
      return w.ReplyProblem(*this, scratch, bhttp::status::forbidden, "cross_site_refused",
                            refused);
    }
    if (auto refused_token = w.AdminTokenRefusal(*this, scratch)) return refused_token;
    // The caller's own limits and usage (Identify), by the key the request presents.
    if (method == "GET" && (path == "/v1/rate-limit" || path == "/v1/usage")) return std::nullopt;
    if (method == "POST" && path == "/admin/reload") {
      auto r = gw.Reload();
      return r ? w.Reply(*this, scratch, bhttp::status::ok, "{\"status\":\"reloaded\"}")
               : w.ReplyProblem(*this, scratch, bhttp::status::bad_request, "invalid_config",
                                r.error());
    }
    if (method == "GET" && path.substr(0, 12) == "/admin/keys/") {
      const policy::Key* k = policy->FindById(path.substr(12));
      if (!k)
        return w.ReplyProblem(*this, scratch, bhttp::status::not_found, "unknown_key",
                              "no key with this id");
      return w.Reply(*this, scratch, bhttp::status::ok, AdminKeyBody(*k));
    }
    if (method == "GET" && path == "/admin/usage") return Step::kAdminUsage;
    if (path == "/admin/deny" || path == "/admin/deny/remove") return w.AdminDeny(*this, scratch);
    if (method == "GET" && path == "/admin/top") return w.AdminTop(*this, scratch);
    if (const UiAsset* page = method == "GET" ? FindUiAsset(path) : nullptr)  // GET /admin/ui
      return w.Reply(*this, scratch, bhttp::status::ok, page->body, kUiHeaders, page->content_type);
    if (auto it = gw.admin_endpoints.find(std::string(method) + " " + std::string(path));
        it != gw.admin_endpoints.end()) {
      admin_hook = &it->second;
      return Step::kAdminHook;
    }
    return w.ReplyProblem(*this, scratch, bhttp::status::not_found, "not_found",
                          "unknown admin endpoint");
  }
  return std::nullopt;
}

void Exchange::JoinForwardedFor(Scratch& scratch) {
  Gateway::Impl& gw = w_->gw;
  // Every X-Forwarded-For line is one list (RFC 9110 5.3): a trusted proxy that appends its
  // own line after the client's must be read, not the client's first line.
  size_t forwarded_lines = 0;
  for (const RequestHead::Field& f : head->fields) {
    if (f.name.size() != 15 || !util::EqualsIgnoreCase(f.name, "X-Forwarded-For")) continue;
    if (++forwarded_lines == 1) {
      forwarded_for = f.value;
      continue;
    }
    if (forwarded_lines == 2) scratch.forwarded_for.assign(forwarded_for);
    scratch.forwarded_for.append(", ").append(f.value);
    forwarded_for = scratch.forwarded_for;
  }
  if (forwarded_for.empty()) {
    client.assign(peer);  // already in the form ClientAddress() gives (see Session())
  } else {
    bool unparsed = false;
    client = policy->ClientAddress(peer_ip, forwarded_for, &unparsed);
    if (unparsed) gw.forwarded_for_unparsed.fetch_add(1, std::memory_order_relaxed);
  }
}

std::optional<Step> Exchange::CheckSizes(Scratch& scratch, const engine::SizeLimits& max) {
  const auto refuse = [&](bhttp::status status, const char* code, const char* what, uint64_t n) {
    client_keep_alive = false;
    return w_->ReplyProblem(*this, scratch, status, code,
                            std::string("the request's ") + what +
                                " is larger than its route takes (" + std::to_string(n) +
                                " bytes)");
  };
  if (max.head_bytes && ForwardedHeadSize(*head) > *max.head_bytes)
    return refuse(bhttp::status::request_header_fields_too_large, "header_too_large", "head",
                  *max.head_bytes);
  if (!max.body_bytes) return std::nullopt;
  if (head->content_length.value_or(0) > *max.body_bytes)
    return refuse(bhttp::status::payload_too_large, "body_too_large", "body", *max.body_bytes);
  // A chunked body is held to it as it arrives (RenderBodyError: 413 before anything is sent).
  if (body_parser) body_parser->body_limit(*max.body_bytes);
  return std::nullopt;
}

bool Exchange::Demands(const policy::Route& route, config::RouteIdentity demanded) {
  using I = config::RouteIdentity;
  cert_route = route.identity == I::kClientCert || demanded == I::kClientCert;
  return demanded == I::kClientCert || demanded == I::kKey;
}

bool Exchange::ReadKey() {
  // A client_cert route reads no API key; on others a certificate stands for a key when the
  // request presents none.
  const policy::Policy& pol = *policy;
  if (!cert_route)
    presented = pol.PresentedKey([this](const std::string& name) { return head->Get(name); });
  bool certified = false;
  if (!presented.empty()) {
    key = w_->key_cache.Find(pol, generation, presented);
  } else if (client_cert) {
    key = pol.FindByCertificate(client_cert->sha256_hex, client_cert->names);
    certified = key != nullptr;
  }
  if (key) w_->gw.meter->Prefetch(usage::MeterTag{key, generation});
  return certified;
}

Step Exchange::Identify(Scratch& scratch) {
  Worker& w = *w_;
  Gateway::Impl& gw = w.gw;
  const policy::Policy& pol = *policy;
  // The routes the method and its overrides meet: the strictest's limits apply.
  const engine::RoutesMet met =
      engine::MeetRoutes(pol, method, path, query, OverrideFields{*head}, route_host);
  const policy::Route& route = *met.strictest;
  upstream = route.upstream;
  log.route = route.label;  // what tollgate replay re-derives routes and costs against
  log.cost_param = route.cost.query;
  if (pol.route_size_limits()) {
    if (auto refused = CheckSizes(scratch, met.sizes)) return *refused;
  }
  now = util::SystemClock::Instance().Now();
  const auto& pub = gw.server.public_endpoints;
  status_endpoint = (admin || pub.rate_limit) && method == "GET" && path == "/v1/rate-limit";
  const bool usage_endpoint = (admin || pub.usage) && method == "GET" && path == "/v1/usage";
  JoinForwardedFor(scratch);
  deny_status = decision_service ? static_cast<bhttp::status>(gw.decision.deny_status)
                                 : bhttp::status::too_many_requests;

  // The status and usage endpoints are about the caller's key, whatever the route, and
  // consume nothing.
  const bool about_the_key = status_endpoint || usage_endpoint;
  const bool key_required = Demands(route, met.strongest);
  const bool certified = (engine::ReadsKey(&route, about_the_key) || key_required) && ReadKey();
  const std::shared_ptr<const policy::DenyList> runtime_deny = gw.RuntimeDeny();
  const engine::Admitted admission = engine::Admitter(pol).Admit(
      {.route = &route,
       .presented_key = !presented.empty() || certified,
       .key = key,
       .client = client,
       .query = query,
       .fixed_cost = about_the_key ? std::optional<int64_t>(0) : std::nullopt,
       .now = now,
       .about_the_key = about_the_key,
       .key_required = key_required,
       .runtime_deny = runtime_deny.get()},
      checks, scopes);
  if (admission.denied) return Blocked(scratch);
  n_checks = admission.n;
  if (admission.kind == engine::Admission::Kind::kInvalidKey) {
    // Decided below (Conclude): repeated invalid keys from one address are limited per address.
    gw.invalid_keys.fetch_add(1, std::memory_order_relaxed);
    log.decision = contract::LogDecision::kInvalidKey;
    invalid_key = true;
    request = {.batch = {.scope = scopes.primary, .checks = {checks.data(), 1}},
               .fail_mode = engine::FailMode::kOpen};
    return Step::kDecide;
  }
  plan = admission.plan;
  if (key) log.key_id = key->id;
  if (usage_endpoint) return Step::kKeyUsage;
  if (plan) log.plan = plan->name;
  if (admission.kind == engine::Admission::Kind::kInvalidCost) {
    return w.ReplyProblem(*this, scratch, bhttp::status::bad_request, "invalid_cost",
                          admission.error);
  }
  if (upgrade.kind == UpgradeAsk::Kind::kUpgrade && !status_endpoint) {
    if (auto refused = w.ReserveUpgrade(*this, scratch)) return *refused;
  }
  log.cost = admission.cost;
  log.metered = admission.kind == engine::Admission::Kind::kChecks && !status_endpoint;
  if (n_checks > 0) {
    request = {.batch = {.scope = scopes.primary,
                         .checks = {checks.data(), n_checks},
                         .mode = status_endpoint ? store::Mode::kPeek : store::Mode::kConsume,
                         // The memory store decides now, on this thread: at the time already read.
                         .now = gw.engine->DecidesAtOnce() ? std::optional(now) : std::nullopt},
               // GET /v1/rate-limit reports the shared budget or nothing (503): not a local share.
               .fail_mode = status_endpoint && route.fail_mode == config::FailMode::kLocal
                                ? engine::FailMode::kOpen
                                : engine::EngineFailMode(route.fail_mode)};
    if (!status_endpoint) w.ReserveHold(*this);
    decide_start = Clock::now();
    return Step::kDecide;
  }
  if (status_endpoint)
    return w.ReplyProblem(*this, scratch, bhttp::status::not_found, "not_found", "no limits apply");
  return Pass(scratch);
}

Step Exchange::Blocked(Scratch& scratch) {
  w_->gw.blocked.fetch_add(1, std::memory_order_relaxed);
  log.decision = contract::LogDecision::kBlocked;
  if (key) log.key_id = key->id;
  return w_->ReplyProblem(*this, scratch, bhttp::status::forbidden, "blocked",
                          "this client is blocked");
}

void Exchange::DescribedRequest(std::string_view& target, std::string_view& host) {
  Gateway::Impl& gw = w_->gw;
  // One proxy's headers only: Traefik forwards every client header to the check, so a client's
  // own X-Original-URI beside Traefik's X-Forwarded-Uri must not be read (issue 18). Envoy's
  // ext_authz sends the original method and path as the check request's own.
  std::string_view uri, original_method, original_host;
  switch (gw.decision.proxy) {
    case config::DecisionProxy::kNginx:
      uri = head->Get("X-Original-URI");
      original_method = head->Get("X-Original-Method");
      original_host = head->Get("X-Original-Host");
      break;
    case config::DecisionProxy::kTraefik:
      uri = head->Get("X-Forwarded-Uri");
      original_method = head->Get("X-Forwarded-Method");
      original_host = head->Get("X-Forwarded-Host");
      break;
    case config::DecisionProxy::kEnvoy:
      return;
  }
  if (uri.empty() && original_method.empty() && original_host.empty()) return;
  if (!policy->IsTrusted(peer_ip)) {
    // Anyone who can reach the listener could name a cheaper route: decided on the check
    // request's own line instead, and counted.
    gw.untrusted_headers.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!uri.empty()) target = uri;
  if (!original_method.empty()) method = original_method;
  host = original_host;  // for routes with `host:`; empty: the check request's own
}

Step Exchange::Conclude(Scratch& scratch) {
  Worker& w = *w_;
  Gateway::Impl& gw = w.gw;
  const policy::Policy& pol = *policy;
  const engine::Verdict& v = verdict;
  HeaderList& rate_headers = scratch.rate_headers;
  const std::span<const store::Check> cs{checks.data(), n_checks};
  const std::span<const core::Decision> ds{decisions.data(), n_checks};
  // The decision listener denies with its own status, and nginx drops an auth subrequest's
  // body: the code travels in a header too.
  const contract::AnswerOptions options{.headers = &pol.config().headers,
                                        .deny_status = static_cast<int>(deny_status),
                                        .deny_unavailable = decision_service,
                                        .code_header = decision_service};
  scratch.body.clear();
  if (invalid_key) {
    using contract::Credential;
    const Credential c =
        cert_route ? (client_cert ? Credential::kUnknownCertificate : Credential::kNoCertificate)
        : presented.empty() ? Credential::kNoKey
                            : Credential::kUnknownKey;
    const contract::Answer a =
        contract::RespondInvalidKey(v, cs[0], ds[0], c, options, rate_headers, scratch.body);
    return w.Reply(*this, scratch, static_cast<bhttp::status>(a.status), scratch.body,
                   rate_headers.Rendered(), a.content_type);
  }
  gw.limiter_latency.Observe(SecondsSince(decide_start));
  // Headers advertise the checks that reject this caller: its own limits when its cohort is
  // enforced (issue 20), and route limits that hold every caller (issue 31).
  const bool enforced =
      std::any_of(cs.begin(), cs.end(), [](const store::Check& c) { return c.enforced; });

  if (status_endpoint) {
    // GET /v1/rate-limit: the caller's limits and usage; consumes nothing.
    if (v.kind == engine::Verdict::Kind::kDegraded ||
        v.kind == engine::Verdict::Kind::kUnavailable) {
      return w.Reply(
          *this, scratch, bhttp::status::service_unavailable,
          RejectionBody(cs, ds, engine::Verdict{.kind = engine::Verdict::Kind::kUnavailable}),
          "Retry-After: 1\r\n", "application/problem+json");
    }
    AppendRateLimitHeaders(pol.config().headers, cs, ds, v, rate_headers);
    log.decision = contract::LogDecision::kStatus;
    return w.Reply(*this, scratch, bhttp::status::ok, RateLimitStatusBody(*key, *plan, cs, ds, v),
                   enforced ? std::string_view(rate_headers.Rendered()) : "");
  }

  w.CountDecision(*this, *plan, cs, ds);
  if (v.kind == engine::Verdict::Kind::kRejected) return w.Reject(*this, scratch, options);
  const contract::Answer a =
      contract::Respond(v, cs, ds, enforced, options, rate_headers, scratch.body);
  if (!a.allowed) {
    return w.Reply(*this, scratch, static_cast<bhttp::status>(a.status), scratch.body,
                   rate_headers.Rendered(), a.content_type);
  }
  return Pass(scratch);
}

Step Exchange::Pass(Scratch& scratch) {
  Worker& w = *w_;
  if (!decision_service) return Step::kForward;
  // Allowed: the proxy in front forwards the request itself. The key id and plan go back in
  // headers the proxy may pass upstream (nginx: auth_request_set).
  if (key) {
    scratch.rate_headers.Add("X-Tollgate-Key-Id", key->id);
    scratch.rate_headers.Add("X-Tollgate-Plan", plan->name);
  }
  return w.Reply(*this, scratch, bhttp::status::ok, "", scratch.rate_headers.Rendered(),
                 "text/plain");
}

}  // namespace tollgate::http
