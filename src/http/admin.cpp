// The admin listener's actions: the deny list (GET/POST /admin/deny, /admin/deny/remove),
// POST /admin/reset and GET /admin/top. Each change is written to the event log.
#include <charconv>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <tollgate/engine/admitter.hpp>
#include <tollgate/engine/checks.hpp>
#include <tollgate/util/clock.hpp>
#include <tollgate/util/query.hpp>

#include "client_body.hpp"
#include "endpoints.hpp"
#include "worker.hpp"

namespace tollgate::http {
namespace json = boost::json;

std::shared_ptr<const policy::DenyList> Gateway::Impl::RuntimeDeny() {
  if (!has_runtime_deny.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard lock(deny_mu);
  return runtime_deny;
}

void Gateway::Impl::SetRuntimeDeny(std::shared_ptr<const policy::DenyList> list) {
  const bool any = !list->empty();
  {
    std::lock_guard lock(deny_mu);
    runtime_deny = std::move(list);
  }
  has_runtime_deny.store(any, std::memory_order_relaxed);
}

std::optional<core::Error> Gateway::Impl::ChangeDeny(bool add, policy::DenyList::Kind kind,
                                                     std::string_view value) {
  auto next = std::make_shared<policy::DenyList>();
  {
    std::lock_guard lock(deny_mu);
    for (const auto& e : runtime_deny->entries()) {
      if (!(e.kind == kind && e.value == value)) (void)next->Add(e.kind, e.value);
    }
  }
  if (add) {
    if (auto error = next->Add(kind, value)) return error;
  }
  const std::string field = std::string(policy::DenyList::NameOf(kind)) + ":" + std::string(value);
  if (replicas) replicas->ChangeDenyEntry(add, field);  // the others read it within a second
  SetRuntimeDeny(std::move(next));
  log.Error("{\"level\":\"info\",\"msg\":\"admin: deny list " +
            std::string(add ? "entry added" : "entry removed") + "\",\"kind\":\"" +
            std::string(policy::DenyList::NameOf(kind)) + "\",\"value\":\"" +
            util::JsonEscape(value) + "\"}");
  return std::nullopt;
}

// The deny entries the other replicas added or removed (every second).
void Gateway::Impl::SyncDeny() {
  if (!replicas) return;
  replicas->ReadDenyEntries([this](std::optional<std::vector<std::string>> entries) {
    if (!entries) return;  // the store cannot be read: the list held stays
    auto next = std::make_shared<policy::DenyList>();
    for (const std::string& field : *entries) {
      const size_t colon = field.find(':');
      const auto kind = policy::DenyList::KindOf(std::string_view(field).substr(0, colon));
      if (kind && colon != std::string::npos) (void)next->Add(*kind, field.substr(colon + 1));
    }
    SetRuntimeDeny(std::move(next));
  });
}

// POST /admin/reset with {"key_id": ID} or {"address": IP}: forgets the counters of that key's
// (or address's) plan limits, in its scopes, so that its next request finds them fresh.
void Gateway::Impl::Reset(std::string body, AdminReply reply) {
  auto problem = [&reply](int status, std::string_view code, std::string_view detail) {
    reply(status, contract::ProblemBody(status, code, detail));
  };
  boost::system::error_code ec;
  const json::value doc = json::parse(body, ec);
  const json::object* o = ec ? nullptr : doc.if_object();
  const json::value* id = o ? o->if_contains("key_id") : nullptr;
  const json::value* address = o ? o->if_contains("address") : nullptr;
  if (!o || (id == nullptr) == (address == nullptr) || (id && !id->is_string()) ||
      (address && !address->is_string())) {
    return problem(400, "invalid_reset", R"(the body is {"key_id": "..."} or {"address": "..."})");
  }
  const std::shared_ptr<const policy::Policy> pol = CurrentPolicy();
  const policy::Key* key = nullptr;
  std::string client;
  if (id) {
    key = pol->FindById(std::string_view(id->as_string()));
    if (!key) return problem(404, "unknown_key", "no key with this id");
  } else {
    const std::string_view text = address->as_string();
    if (!policy::ParseAddress(text)) return problem(400, "invalid_reset", "not an IP address");
    client = pol->ClientAddress(text, "");
  }
  // The identity's plan limits (no route's), whether or not the deny list refuses it.
  engine::Scopes scopes;
  std::array<store::Check, engine::kMaxChecks> checks;
  const engine::Admitted a =
      engine::Admitter(*pol).Admit({.presented_key = key != nullptr,
                                    .key = key,
                                    .client = client,
                                    .fixed_cost = 0,
                                    .now = util::SystemClock::Instance().Now(),
                                    .checks_when_denied = true},
                                   checks, scopes);
  const size_t n = a.n;
  const store::Batch batch{.scope = scopes.primary, .checks = {checks.data(), n}};
  const std::string done = "{\"status\":\"reset\",\"scope\":\"" + util::JsonEscape(scopes.primary) +
                           "\",\"limits\":" + std::to_string(n) + "}";
  log.Error("{\"level\":\"info\",\"msg\":\"admin: counters reset\",\"scope\":\"" +
            util::JsonEscape(scopes.primary) + "\"}");
  store.Forget(batch, [reply = std::move(reply), done](std::string error) {
    if (!error.empty()) return reply(503, contract::ProblemBody(503, "store_unavailable", error));
    reply(200, done);
  });
}

// GET /admin/deny lists the deny list (the configuration's and the admin API's);
// POST /admin/deny?kind=key|account|address&value=V adds to it, POST /admin/deny/remove removes.
Step Worker::AdminDeny(Exchange& ex, Scratch& scratch) {
  if (ex.method == "GET" && ex.path == "/admin/deny") {
    std::shared_ptr<const policy::DenyList> runtime;
    {
      std::lock_guard lock(gw.deny_mu);
      runtime = gw.runtime_deny;
    }
    return Reply(ex, scratch, bhttp::status::ok,
                 DenyListBody(ex.policy->deny().entries(), runtime->entries()));
  }
  if (ex.method != "POST")
    return ReplyProblem(ex, scratch, bhttp::status::method_not_allowed, "method_not_allowed",
                        "GET /admin/deny, POST /admin/deny or /admin/deny/remove");
  const auto kind = policy::DenyList::KindOf(util::QueryValue(ex.query, "kind").value_or(""));
  const std::string value = util::QueryValue(ex.query, "value").value_or("");
  if (!kind)
    return ReplyProblem(ex, scratch, bhttp::status::bad_request, "invalid_deny",
                        "kind must be key, account or address");
  if (auto error = gw.ChangeDeny(ex.path == "/admin/deny", *kind, value))
    return ReplyProblem(ex, scratch, bhttp::status::bad_request, "invalid_deny", error->message);
  return Reply(ex, scratch, bhttp::status::ok,
               ex.path == "/admin/deny" ? "{\"status\":\"added\"}" : "{\"status\":\"removed\"}");
}

// Before any admin endpoint, /healthz and /metrics included: a request whose Host (and
// absolute-form target) is not the listener's own is refused, as a page reaching 127.0.0.1
// through a name that an attacker points there sends its own name (DNS rebinding).
std::optional<Step> Worker::AdminGuardRefusal(Exchange& ex, Scratch& scratch) {
  const std::string_view host = ex.head->Get("Host");
  if (gw.admin_guard.HostAllowed(host) &&
      (ex.authority.empty() || gw.admin_guard.HostAllowed(ex.authority))) {
    return std::nullopt;
  }
  gw.metrics.Counter("tollgate_admin_refused_total", "reason=\"host\"")
      .fetch_add(1, std::memory_order_relaxed);
  return ReplyProblem(ex, scratch, bhttp::status::misdirected_request, "host_not_allowed",
                      "the admin listener answers localhost, its own addresses and "
                      "server.admin_hosts only");
}

// Every admin request but GET and HEAD changes something: with server.admin_token set it
// needs `Authorization: Bearer <token>` (never a query parameter: those end up in logs).
std::optional<Step> Worker::AdminTokenRefusal(Exchange& ex, Scratch& scratch) {
  if (!gw.admin_guard.token_required() || !AdminGuard::Mutates(ex.method)) return std::nullopt;
  const AdminGuard::Token t = gw.admin_guard.CheckToken(*ex.head);
  if (t == AdminGuard::Token::kOk) return std::nullopt;
  const bool missing = t == AdminGuard::Token::kMissing;
  gw.metrics.Counter("tollgate_admin_refused_total", "reason=\"token\"")
      .fetch_add(1, std::memory_order_relaxed);
  return ReplyProblem(
      ex, scratch, bhttp::status::unauthorized,
      missing ? "admin_token_required" : "invalid_admin_token",
      missing ? "this admin request needs Authorization: Bearer <server.admin_token>"
              : "the admin token is not server.admin_token",
      missing ? "WWW-Authenticate: Bearer realm=\"tollgate-admin\"\r\n"
              : "WWW-Authenticate: Bearer realm=\"tollgate-admin\", error=\"invalid_token\"\r\n");
}

// GET /admin/top?by=rejected|admitted&of=key|address&window=60&n=20: the heaviest callers of
// the last `window` seconds (at most 300), merged over the workers' sketches.
Step Worker::AdminTop(Exchange& ex, Scratch& scratch) {
  const std::string by = util::QueryValue(ex.query, "by").value_or("rejected");
  const std::string of = util::QueryValue(ex.query, "of").value_or("key");
  std::string window = util::QueryValue(ex.query, "window").value_or("60");
  if (!window.empty() && window.back() == 's') window.pop_back();
  int64_t window_s = 0, n = 0;
  const std::string count = util::QueryValue(ex.query, "n").value_or("20");
  const bool numbers =
      std::from_chars(window.data(), window.data() + window.size(), window_s).ec == std::errc() &&
      std::from_chars(count.data(), count.data() + count.size(), n).ec == std::errc();
  if ((by != "rejected" && by != "admitted") || (of != "key" && of != "address") || !numbers ||
      window_s < 1 || window_s > TopOffenders::kMinutes * 60 || n < 1 || n > 1000) {
    return ReplyProblem(ex, scratch, bhttp::status::bad_request, "invalid_top",
                        "by=rejected|admitted, of=key|address, window=1..300 (seconds), n=1..1000");
  }
  const auto sketch =
      by == "rejected"
          ? (of == "key" ? TopOffenders::kRejectedKeys : TopOffenders::kRejectedAddresses)
          : (of == "key" ? TopOffenders::kAdmittedKeys : TopOffenders::kAdmittedAddresses);
  const int64_t now_s = util::SystemClock::Instance().Now().unix_micros() / 1'000'000;
  const metrics::SpaceSaving merged = MergeTop(gw.workers, sketch, window_s, now_s);
  return Reply(ex, scratch, bhttp::status::ok,
               TopBody(by, of, window_s, merged, static_cast<size_t>(n)));
}

// An endpoint of another component (Gateway::AddAdminEndpoint): the body read whole (64 KiB at
// most), the handler's answer awaited.
net::awaitable<Step> Worker::ServeAdminHook(Conn& stream, beast::flat_buffer& buffer, Exchange& ex,
                                            Scratch& scratch) {
  constexpr size_t kMaxBody = 64 * 1024;
  std::string& body = scratch.body;
  body.assign(ex.method == "GET" ? ex.query : std::string_view());  // a GET's input: its query
  if (RequestParser* p = ex.body_parser) {
    // Read as the forwarder reads bodies (client_body.hpp: framing and buffer bounded, issue 31),
    // with no gap longer than server.header_timeout_ms.
    ClientBody client = ClientBody::Start(
        p->chunked(), gw.server.max_header_bytes, gw.server.max_header_fields,
        milliseconds(gw.server.header_timeout_ms), gw.server.min_body_bytes_per_second);
    auto chunk = std::make_unique_for_overwrite<char[]>(kMaxBody);
    while (!p->is_done()) {
      size_t n = 0;
      const beast::error_code ec =
          co_await ReadBodySome(stream, buffer, *p, client, chunk.get(), kMaxBody, &n);
      body.append(chunk.get(), n);
      if (ec || body.size() > kMaxBody) {
        ex.client_keep_alive = false;
        co_return ReplyProblem(
            ex, scratch, ec ? bhttp::status::bad_request : bhttp::status::payload_too_large,
            ec ? "bad_request" : "body_too_large", ec ? ec.message() : "the body is over 64 KiB");
      }
    }
  }
  auto [status, answer] = co_await Await<std::pair<int, std::string>>([&ex, &body](auto resume) {
    (*ex.admin_hook)(body, [resume = std::move(resume)](int s, std::string b) mutable {
      resume(std::pair<int, std::string>(s, std::move(b)));
    });
  });
  body = std::move(answer);
  co_return Reply(ex, scratch, static_cast<bhttp::status>(status), body);
}

}  // namespace tollgate::http
