// The configuration file, section by section: each Parse* step reads one top-level section of
// the YAML into its struct of config.hpp.
#include <algorithm>
#include <charconv>
#include <set>
#include <sstream>

#include <arpa/inet.h>

#include <tollgate/config/config.hpp>
#include <tollgate/util/ascii.hpp>
#include <tollgate/util/host_port.hpp>

#include "config/files.hpp"
#include "config/keys.hpp"
#include "config/limits.hpp"
#include "config/routes.hpp"
#include "config/tls.hpp"
#include "config/upstreams.hpp"
#include "config/yaml.hpp"

namespace tollgate::config {
namespace {

using internal::Bool;
using internal::Expanded;
using internal::Fail;
using internal::Index;
using internal::Int;
using internal::IsToken;
using internal::Join;
using internal::ListenAddress;
using internal::Name;
using internal::OnlyKeys;
using internal::ParseEnum;
using internal::ParseMode;
using internal::ParseTls;
using internal::Secret;
using internal::Set;
using internal::Str;
using internal::StrList;

TargetConfig ParseTarget(const YAML::Node& n, const std::string& path) {
  OnlyKeys(n, path, {"allow_encoded_slash", "allow_path_parameters"});
  TargetConfig t;
  if (n["allow_encoded_slash"])
    t.allow_encoded_slash = Bool(n["allow_encoded_slash"], Join(path, "allow_encoded_slash"));
  if (n["allow_path_parameters"]) {
    t.allow_path_parameters = Bool(n["allow_path_parameters"], Join(path, "allow_path_parameters"));
  }
  return t;
}

// server.admin_token and server.admin_hosts (issue 31): an admin listener that other machines
// can reach must ask for a token.
void ParseAdminGuard(const YAML::Node& s, ServerConfig& server) {
  if (s["admin_token"]) {
    server.admin_token = Secret(s["admin_token"], "server.admin_token");
    if (server.admin_token.empty()) Fail("server.admin_token", "must not be empty");
    // A bearer token is one token68 (RFC 9110 11.2): blanks or controls could never be sent.
    if (std::any_of(server.admin_token.begin(), server.admin_token.end(),
                    [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; })) {
      Fail("server.admin_token", "must not hold blanks or control characters");
    }
  }
  if (s["admin_hosts"]) {
    server.admin_hosts = StrList(s["admin_hosts"], "server.admin_hosts");
    for (size_t i = 0; i < server.admin_hosts.size(); ++i) {
      const std::string& h = server.admin_hosts[i];
      if (h.empty() ||
          h.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:[]") != std::string::npos) {
        Fail(Index("server.admin_hosts", i), "must be a host name or address, got '" + h + "'");
      }
    }
  }
  const auto hp = util::SplitHostPort(server.admin_listen);
  if (!hp) return;  // not host:port: refused as such at start
  const std::string& host = hp->host;
  in_addr v4{};
  const bool loopback =
      host == "localhost" || host == "::1" ||
      (inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127);
  if (!loopback && server.admin_token.empty()) {
    Fail("server.admin_token", "required when server.admin_listen (" + server.admin_listen +
                                   ") is not a loopback address");
  }
}

// server.upgrades (issue 33): protocol tokens (RFC 9110 7.8), h2c refused.
std::vector<std::string> ParseUpgrades(const YAML::Node& u) {
  std::vector<std::string> tokens = StrList(u, "server.upgrades");
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    if (!util::IsProtocolToken(t))
      Fail(Index("server.upgrades", i),
           "must be a protocol token (name or name/version), got '" + t + "'");
    if (util::EqualsIgnoreCase(t, "h2c"))
      Fail(Index("server.upgrades", i),
           "h2c is refused: an upgrade to HTTP/2 is not relayed (the request is served as "
           "HTTP/1.1)");
  }
  return tokens;
}

// server.http2 (issue 34).
void ParseHttp2(const YAML::Node& h, Http2Config& c) {
  const std::string path = "server.http2";
  OnlyKeys(h, path,
           {"enabled", "h2c", "max_concurrent_streams", "header_table_bytes",
            "initial_window_bytes", "connection_window_bytes", "max_resets", "max_control_frames",
            "flood_interval_ms", "max_continuations"});
  if (h["enabled"]) c.enabled = Bool(h["enabled"], path + ".enabled");
  if (h["h2c"]) c.h2c = Bool(h["h2c"], path + ".h2c");
  Set(h, "max_concurrent_streams", path, c.max_concurrent_streams, 1, 10'000);
  Set(h, "header_table_bytes", path, c.header_table_bytes, 0, 65'536);
  // RFC 9113 6.5.2: at most 2^31 - 1.
  Set(h, "initial_window_bytes", path, c.initial_window_bytes, 1'024, (int64_t{1} << 31) - 1);
  Set(h, "connection_window_bytes", path, c.connection_window_bytes, 65'535,
      (int64_t{1} << 31) - 1);
  Set(h, "max_resets", path, c.max_resets, 1, 1'000'000);
  Set(h, "max_control_frames", path, c.max_control_frames, 1, 1'000'000);
  Set(h, "flood_interval_ms", path, c.flood_interval_ms, 100, 3'600'000);
  Set(h, "max_continuations", path, c.max_continuations, 1, 10'000);
}

void ParseServer(const YAML::Node& s, const std::string& base_dir, ServerConfig& server) {
  // clang-format off
  OnlyKeys(
      s, "server",
      {"listen", "admin_listen", "threads", "max_connections", "max_connections_per_address",
       "admin_max_connections", "max_header_bytes", "max_body_bytes", "header_timeout_ms",
       "idle_timeout_ms", "drain_timeout_ms", "access_log", "request_target", "max_held_requests",
       "max_held_per_identity", "shutdown_delay_ms", "public_endpoints", "top_offenders",
       "admin_token", "admin_hosts", "route_match",
       // bounds of heads, bodies and slow clients (issue 31)
       "max_header_fields", "body_buffer_bytes", "body_timeout_ms", "min_body_bytes_per_second",
       "send_timeout_ms",
       // TLS and Upgrade (issue 33)
       "tls", "admin_tls", "upgrades", "upgrade_idle_timeout_ms", "max_upgraded_per_identity",
       "max_upgraded_connections",
       // HTTP/2 (issue 34)
       "http2"});
  // clang-format on
  if (s["listen"]) server.listen = ListenAddress(s["listen"], "server.listen");
  if (s["admin_listen"])
    server.admin_listen = ListenAddress(s["admin_listen"], "server.admin_listen");
  if (s["tls"]) server.tls = ParseTls(s["tls"], "server.tls", base_dir);
  if (const YAML::Node h = s["http2"]) ParseHttp2(h, server.http2);
  if (s["admin_tls"]) server.admin_tls = ParseTls(s["admin_tls"], "server.admin_tls", base_dir);
  Set(s, "threads", "server", server.threads, 0, 256);
  Set(s, "max_connections", "server", server.max_connections, 0, 1'000'000);
  Set(s, "max_connections_per_address", "server", server.max_connections_per_address, 0, 1'000'000);
  Set(s, "admin_max_connections", "server", server.admin_max_connections, 1, 10'000);
  if (s["request_target"])
    server.request_target = ParseTarget(s["request_target"], "server.request_target");
  Set(s, "max_header_bytes", "server", server.max_header_bytes, 1024, 1 << 20);
  Set(s, "max_body_bytes", "server", server.max_body_bytes, 0, int64_t{1} << 40);
  Set(s, "header_timeout_ms", "server", server.header_timeout_ms, 1, 3'600'000);
  Set(s, "idle_timeout_ms", "server", server.idle_timeout_ms, 1, 3'600'000);
  Set(s, "max_header_fields", "server", server.max_header_fields, 1, 100'000);
  Set(s, "body_buffer_bytes", "server", server.body_buffer_bytes, 0, 16 << 20);
  Set(s, "body_timeout_ms", "server", server.body_timeout_ms, 1, 3'600'000);
  Set(s, "min_body_bytes_per_second", "server", server.min_body_bytes_per_second, 1, 1 << 30);
  Set(s, "send_timeout_ms", "server", server.send_timeout_ms, 1, 3'600'000);
  Set(s, "drain_timeout_ms", "server", server.drain_timeout_ms, 0, 3'600'000);
  Set(s, "shutdown_delay_ms", "server", server.shutdown_delay_ms, 0, 600'000);
  if (const YAML::Node pe = s["public_endpoints"]) {
    auto& e = server.public_endpoints;
    e = {.health = false, .rate_limit = false};
    const std::vector<std::string> names = StrList(pe, "server.public_endpoints");
    for (size_t i = 0; i < names.size(); ++i) {
      bool* flag = names[i] == "health"       ? &e.health
                   : names[i] == "rate_limit" ? &e.rate_limit
                   : names[i] == "usage"      ? &e.usage
                   : names[i] == "metrics"    ? &e.metrics
                                              : nullptr;
      if (!flag) {
        Fail(Index("server.public_endpoints", i),
             "must be health, rate_limit, usage or metrics, got '" + names[i] + "'");
      }
      *flag = true;
    }
  }
  Set(s, "max_held_requests", "server", server.max_held_requests, 0, 1'000'000);
  Set(s, "max_held_per_identity", "server", server.max_held_per_identity, 0, 1'000'000);
  if (const YAML::Node u = s["upgrades"]) server.upgrades = ParseUpgrades(u);
  Set(s, "upgrade_idle_timeout_ms", "server", server.upgrade_idle_timeout_ms, 1, 86'400'000);
  Set(s, "max_upgraded_per_identity", "server", server.max_upgraded_per_identity, 0, 1'000'000);
  Set(s, "max_upgraded_connections", "server", server.max_upgraded_connections, 0, 1'000'000);
  if (s["access_log"]) server.access_log = Bool(s["access_log"], "server.access_log");
  if (s["top_offenders"]) server.top_offenders = Bool(s["top_offenders"], "server.top_offenders");
  if (const YAML::Node m = s["route_match"]) {
    server.exact_route_match = internal::ParseEnum<bool>(
        m, "server.route_match", {{"fold", false}, {"exact", true}}, "fold or exact");
  }
  ParseAdminGuard(s, server);
}

// store.tls: the store parses its files.
void ParseStoreTls(const YAML::Node& t, const std::string& base_dir, StoreConfig& store) {
  OnlyKeys(t, "store.tls", {"ca_file", "cert_file", "key_file"});
  internal::ReadPemFiles(t, "store.tls", base_dir,
                         {&store.tls_ca_file, &store.tls_cert_file, &store.tls_key_file});
  if (store.url.rfind("rediss", 0) != 0)
    Fail("store.tls", "needs a rediss:// or rediss-cluster:// url");
}

// `s`: the `store` section, undefined when absent (the check of a redis url applies anyway).
void ParseStore(const YAML::Node& s, const std::string& base_dir, StoreConfig& store) {
  if (s) {
    OnlyKeys(s, "store",
             {"type", "max_keys", "prefix", "url", "timeout_ms", "connect_timeout_ms", "deny_cache",
              "replicas", "tls"});
    if (s["type"]) store.type = ParseEnum(s["type"], "store.type", kStoreTypeNames);
    Set(s, "max_keys", "store", store.max_keys, 1, int64_t{1} << 32);
    if (s["prefix"]) store.prefix = Str(s["prefix"], "store.prefix");
    if (s["url"]) store.url = Secret(s["url"], "store.url");
    Set(s, "timeout_ms", "store", store.timeout_ms, 1, 60'000);
    Set(s, "connect_timeout_ms", "store", store.connect_timeout_ms, 1, 60'000);
    if (s["deny_cache"]) store.deny_cache = Bool(s["deny_cache"], "store.deny_cache");
    Set(s, "replicas", "store", store.replicas, 0, 10'000);
    if (store.prefix.empty()) Fail("store.prefix", "must not be empty");
    if (const YAML::Node t = s["tls"]) ParseStoreTls(t, base_dir, store);
  }
  if (store.type == StoreType::kRedis && store.url.empty())
    Fail("store.url", "required for store.type redis");
}

// `id`: the `identity` section, undefined when absent (invalid_key_limit gets its default).
void ParseIdentity(const YAML::Node& id, IdentityConfig& identity) {
  identity.invalid_key_limit = {.algorithm = core::Algorithm::kTokenBucket,
                                .capacity = 10,
                                .refill = *core::Rate::Parse("0.2", 1)};
  if (!id) return;
  OnlyKeys(id, "identity", {"api_key_headers", "trusted_proxies", "invalid_key_limit"});
  if (id["api_key_headers"]) {
    identity.api_key_headers = StrList(id["api_key_headers"], "identity.api_key_headers");
    if (identity.api_key_headers.empty()) Fail("identity.api_key_headers", "must not be empty");
    for (size_t i = 0; i < identity.api_key_headers.size(); ++i) {
      if (!IsToken(identity.api_key_headers[i])) {
        Fail(Index("identity.api_key_headers", i),
             "must be a header name (letters, digits, -, ...)");
      }
    }
  }
  if (id["trusted_proxies"])
    identity.trusted_proxies = StrList(id["trusted_proxies"], "identity.trusted_proxies");
  if (const YAML::Node l = id["invalid_key_limit"]) {
    std::set<std::string> allowed = internal::LimitFields();
    allowed.erase("name");
    OnlyKeys(l, "identity.invalid_key_limit", allowed);
    internal::ReadLimitFields(l, "identity.invalid_key_limit", identity.invalid_key_limit);
  }
}

// `plans`: undefined when absent (then refused: at least one plan).
// `required`: false for a process that only serves descriptor files (rls.envoy_config).
void ParsePlans(const YAML::Node& plans, std::vector<PlanConfig>& out, bool required) {
  if (plans) {
    internal::RequireMap(plans, "plans");
    for (const auto& kv : plans) {
      const std::string name = kv.first.as<std::string>();
      const std::string path = Join("plans", name);
      if (!IsFieldSafe(name) || name.empty())
        Fail(path, "a plan name must not be empty or contain control characters");
      OnlyKeys(kv.second, path, {"mode", "enforce_percent", "scope", "limits", "unlimited"});
      PlanConfig p;
      p.name = name;
      if (kv.second["mode"]) p.mode = ParseMode(kv.second["mode"], Join(path, "mode"));
      if (kv.second["enforce_percent"]) {
        if (p.mode) Fail(Join(path, "enforce_percent"), "give mode or enforce_percent, not both");
        p.enforce_percent = static_cast<int>(
            Int(kv.second["enforce_percent"], Join(path, "enforce_percent"), 0, 100));
      }
      if (kv.second["scope"]) {
        p.scope = Str(kv.second["scope"], Join(path, "scope"));
        if (p.scope != "key" && p.scope != "account")
          Fail(Join(path, "scope"), "must be key or account");
      }
      // Issue 31: `limits: []` made a plan unlimited without saying so; that takes
      // `unlimited: true` now, and no limits.
      const bool unlimited =
          kv.second["unlimited"] && Bool(kv.second["unlimited"], Join(path, "unlimited"));
      if (unlimited && kv.second["limits"])
        Fail(Join(path, "limits"), "an unlimited plan has no limits");
      if (!unlimited) {
        if (!kv.second["limits"]) Fail(Join(path, "limits"), "required (or unlimited: true)");
        p.limits = internal::ParseLimits(kv.second["limits"], Join(path, "limits"), true);
        if (p.limits.empty()) {
          Fail(Join(path, "limits"),
               "must hold 1 to 8 limits; for a plan without limits, write unlimited: true "
               "instead (a quota with neither allowance nor ceiling meters without limiting)");
        }
      }
      out.push_back(std::move(p));
    }
  }
  if (out.empty() && required)
    Fail("plans", "at least one plan is required (unless rls.envoy_config is all you serve)");
}

// A route's cost: a number, or {query, per, min}.
void ParseAnonymous(const YAML::Node& a, std::vector<LimitConfig>& anonymous) {
  OnlyKeys(a, "anonymous", {"limits"});
  if (a["limits"]) anonymous = internal::ParseLimits(a["limits"], "anonymous.limits", false);
}

void ParseDecision(const YAML::Node& d, DecisionConfig& decision) {
  OnlyKeys(d, "decision", {"listen", "deny_status", "proxy", "request_target"});
  if (d["listen"]) decision.listen = ListenAddress(d["listen"], "decision.listen");
  Set(d, "deny_status", "decision", decision.deny_status, 400, 599);
  if (d["proxy"]) {
    const std::string p = Str(d["proxy"], "decision.proxy");
    if (p == "nginx")
      decision.proxy = DecisionProxy::kNginx;
    else if (p == "traefik")
      decision.proxy = DecisionProxy::kTraefik;
    else if (p == "envoy")
      decision.proxy = DecisionProxy::kEnvoy;
    else
      Fail("decision.proxy", "must be nginx, traefik or envoy, got '" + p + "'");
  }
  if (d["request_target"])
    decision.request_target = ParseTarget(d["request_target"], "decision.request_target");
}

RlsDomainConfig ParseRlsDomain(const YAML::Node& d, const std::string& path) {
  OnlyKeys(d, path, {"domain", "key_entry", "ip_entry"});
  RlsDomainConfig dc;
  if (!d["domain"]) Fail(Join(path, "domain"), "required");
  dc.domain = Str(d["domain"], Join(path, "domain"));
  if (d["key_entry"]) dc.key_entry = Str(d["key_entry"], Join(path, "key_entry"));
  if (d["ip_entry"]) dc.ip_entry = Str(d["ip_entry"], Join(path, "ip_entry"));
  if (dc.key_entry.empty() && dc.ip_entry.empty()) Fail(path, "give key_entry or ip_entry");
  return dc;
}

void ParseRls(const YAML::Node& r, const std::string& base_dir, RlsConfig& rls) {
  OnlyKeys(
      r, "rls",
      {"listen", "domains", "envoy_config", "shadow_mode", "response_headers", "near_limit_ratio"});
  if (r["listen"]) rls.listen = ListenAddress(r["listen"], "rls.listen");
  if (r["envoy_config"]) {
    rls.envoy_config = Expanded(r["envoy_config"], "rls.envoy_config");
    if (rls.envoy_config.empty()) Fail("rls.envoy_config", "must not be empty");
    rls.envoy_config = internal::FromConfigDir(base_dir, rls.envoy_config);
  }
  if (r["shadow_mode"]) rls.shadow_mode = Bool(r["shadow_mode"], "rls.shadow_mode");
  if (r["response_headers"])
    rls.response_headers = Bool(r["response_headers"], "rls.response_headers");
  if (const YAML::Node n = r["near_limit_ratio"]) {
    double ratio = -1;
    try {
      ratio = n.as<double>();
    } catch (const YAML::Exception&) {
    }
    if (!(ratio > 0 && ratio <= 1)) Fail("rls.near_limit_ratio", "must be a number in (0, 1]");
    rls.near_limit_ratio = ratio;
  }
  if (!rls.envoy_config.empty() && rls.listen.empty())
    Fail("rls.envoy_config", "needs rls.listen (the gRPC listener that serves it)");
  if (const YAML::Node ds = r["domains"]) {
    if (!ds.IsSequence()) Fail("rls.domains", "must be a list");
    for (size_t i = 0; i < ds.size(); ++i) {
      rls.domains.push_back(ParseRlsDomain(ds[i], Index("rls.domains", i)));
    }
  }
}

void ParseHeaders(const YAML::Node& h, HeadersConfig& headers) {
  const auto sets = StrList(h, "headers");
  headers = {false, false, false};
  for (size_t i = 0; i < sets.size(); ++i) {
    if (sets[i] == "ietf")
      headers.ietf = true;
    else if (sets[i] == "ratelimit")
      headers.ratelimit = true;
    else if (sets[i] == "x-ratelimit")
      headers.x_ratelimit = true;
    else
      Fail(Index("headers", i), "must be ietf, ratelimit or x-ratelimit, got '" + sets[i] + "'");
  }
}

// The sections in a fixed order, which decides which error a file with several gets: plans
// before keys (a key's overrides name its plan's limits).
Config Parse(const YAML::Node& root, const std::string& base_dir) {
  Config c;
  if (!root || root.IsNull()) Fail("", "the configuration is empty");
  OnlyKeys(root, "",
           {"server", "upstream", "store", "mode", "identity", "plans", "keys", "keys_file",
            "routes", "anonymous", "headers", "decision", "rls", "deny", "upstreams"});
  if (const YAML::Node s = root["server"]) ParseServer(s, base_dir, c.server);
  internal::ParseUpstreams(root, base_dir, c);
  ParseStore(root["store"], base_dir, c.store);
  if (root["mode"]) c.mode = ParseMode(root["mode"], "mode");
  ParseIdentity(root["identity"], c.identity);
  const YAML::Node rls = root["rls"];
  ParsePlans(root["plans"], c.plans, !(rls && rls.IsMap() && rls["envoy_config"]));
  internal::ParseKeys(root, base_dir, c);
  if (const YAML::Node routes = root["routes"]) {
    c.routes = internal::ParseRoutes(routes, c.server.exact_route_match);
    for (size_t i = 0; i < c.routes.size(); ++i) {
      const RouteConfig& r = c.routes[i];
      if (r.identity == RouteIdentity::kClientCert &&
          c.server.tls.client_auth == TlsConfig::ClientAuth::kOff) {
        Fail(Join(Index("routes", i), "identity"),
             "client_cert needs server.tls.client_certificates");
      }
      // A route's size limits only tighten the server's, which hold while the head is read.
      if (r.max_header_bytes > c.server.max_header_bytes) {
        Fail(Join(Index("routes", i), "max_header_bytes"),
             "must not exceed server.max_header_bytes (" +
                 std::to_string(c.server.max_header_bytes) + ")");
      }
      if (r.max_body_bytes > c.server.max_body_bytes) {
        Fail(Join(Index("routes", i), "max_body_bytes"),
             "must not exceed server.max_body_bytes (" + std::to_string(c.server.max_body_bytes) +
                 ")");
      }
    }
  }
  internal::ResolveRouteUpstreams(c);
  if (const YAML::Node a = root["anonymous"]) ParseAnonymous(a, c.anonymous);
  if (const YAML::Node d = root["decision"]) ParseDecision(d, c.decision);
  if (const YAML::Node r = root["rls"]) ParseRls(r, base_dir, c.rls);
  if (const YAML::Node h = root["headers"]) ParseHeaders(h, c.headers);
  if (const YAML::Node d = root["deny"]) {
    OnlyKeys(d, "deny", {"keys", "accounts", "addresses"});
    if (d["keys"]) c.deny.keys = StrList(d["keys"], "deny.keys");
    if (d["accounts"]) c.deny.accounts = StrList(d["accounts"], "deny.accounts");
    if (d["addresses"]) c.deny.addresses = StrList(d["addresses"], "deny.addresses");
  }
  return c;
}

// `with_line`: errors start with the field's line ("line 7: plans.free.mode: ..."), for a file.
core::Result<Config> ParseText(const std::string& yaml_text, const std::string& base_dir,
                               bool with_line) {
  YAML::Node root;
  try {
    root.reset(YAML::Load(yaml_text));
    internal::RefuseDuplicateKeys(root, "");
    return Parse(root, base_dir);
  } catch (internal::FieldError& e) {
    if (with_line && e.line == 0) e.line = internal::LineOf(root, e.path);
    const std::string at = with_line && e.line > 0 ? "line " + std::to_string(e.line) + ": " : "";
    return core::Error{at + internal::ErrorText(e)};
  } catch (const YAML::Exception& e) {
    return core::Error{std::string("invalid YAML: ") + e.what()};
  }
}

}  // namespace

core::Result<Config> ParseConfig(const std::string& yaml_text, const std::string& base_dir) {
  return ParseText(yaml_text, base_dir, false);
}

core::Result<Config> LoadConfigFile(const std::string& path, std::string* text) {
  auto content = internal::ReadRegularFile(path);
  if (!content) return core::Error{"cannot read config file '" + path + "': " + content.error()};
  if (text) *text = *content;
  const size_t slash = path.rfind('/');
  return ParseText(*content, slash == std::string::npos ? "." : path.substr(0, slash), true);
}

}  // namespace tollgate::config
