#include "config/upstreams.hpp"

#include <algorithm>
#include <charconv>
#include <set>

#include "config/tls.hpp"
#include "config/yaml.hpp"

namespace tollgate::config::internal {
namespace {

// The path of an upstream url after its authority ("" or "/api"), as the gateway prefixes it.
std::string BasePath(std::string_view url) {
  const std::string_view rest = url.substr(url.rfind("https://", 0) == 0 ? 8 : 7);
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return {};
  const std::string_view base = rest.substr(slash);
  return base == "/" ? std::string() : std::string(base);
}

// http:// or https://, and a port, when given, that names one.
void CheckUrl(const std::string& url, const std::string& field) {
  const bool https = url.rfind("https://", 0) == 0;
  if (url.rfind("http://", 0) != 0 && !https) Fail(field, "must start with http:// or https://");
  // The port, when given, names one (issue 31: ":99999" connected to 99999 - 65536).
  std::string_view authority = std::string_view(url).substr(https ? 8 : 7);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  const size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']', colon) == std::string_view::npos) {
    const std::string_view port = authority.substr(colon + 1);
    int value = 0;
    const auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || port.size() > 5 || ec != std::errc() || p != port.data() + port.size() ||
        value < 1 || value > 65535) {
      Fail(field, "the port must be a number from 1 to 65535, got '" + std::string(port) + "'");
    }
  }
}

void ParseForwardedHeaders(const YAML::Node& fh, const std::string& path,
                           UpstreamConfig::ForwardedHeaders& h) {
  h = {false, false, false, false, false};  // issue 31: the list replaces the default
  const std::vector<std::string> names = StrList(fh, path);
  for (size_t i = 0; i < names.size(); ++i) {
    bool* flag = names[i] == "x_forwarded_proto"  ? &h.x_forwarded_proto
                 : names[i] == "x_forwarded_host" ? &h.x_forwarded_host
                 : names[i] == "x_forwarded_port" ? &h.x_forwarded_port
                 : names[i] == "x_real_ip"        ? &h.x_real_ip
                 : names[i] == "forwarded"        ? &h.forwarded
                                                  : nullptr;
    if (!flag) {
      Fail(Index(path, i),
           "must be x_forwarded_proto, x_forwarded_host, x_forwarded_port, x_real_ip or "
           "forwarded, got '" +
               names[i] + "'");
    }
    *flag = true;
  }
}

// The tls block of `upstream` or of a group; `https`: some url is https://, else `need` says
// what is missing.
void ParseUpstreamTls(const YAML::Node& t, const std::string& path, const std::string& base_dir,
                      bool https, const char* need, UpstreamConfig& upstream) {
  OnlyKeys(t, path, {"verify", "ca_file", "server_name", "cert_file", "key_file"});
  if (!https) Fail(path, need);
  auto& tls = upstream.tls;
  if (t["verify"]) tls.verify = Bool(t["verify"], Join(path, "verify"));
  if (t["server_name"]) tls.server_name = Str(t["server_name"], Join(path, "server_name"));
  ReadPemFiles(t, path, base_dir, {&tls.ca_file, &tls.cert_file, &tls.key_file});
}

// The settings `upstream` and every group share.
void ParseLimitsOf(const YAML::Node& u, const std::string& path, UpstreamConfig& upstream) {
  Set(u, "connect_timeout_ms", path, upstream.connect_timeout_ms, 1, 600'000);
  Set(u, "timeout_ms", path, upstream.timeout_ms, 1, 3'600'000);
  Set(u, "max_connections", path, upstream.max_connections, 1, 100'000);
  Set(u, "queue_size", path, upstream.queue_size, 0, 1'000'000);
  Set(u, "queue_timeout_ms", path, upstream.queue_timeout_ms, 1, 600'000);
  Set(u, "max_client_share_percent", path, upstream.max_client_share_percent, 1, 100);
  if (u["http2"]) upstream.http2 = Bool(u["http2"], Join(path, "http2"));
}

void ParseUpstream(const YAML::Node& u, const std::string& base_dir, UpstreamConfig& upstream) {
  OnlyKeys(u, "upstream",
           {"url", "connect_timeout_ms", "timeout_ms", "max_connections", "queue_size",
            "queue_timeout_ms", "forwarded_headers", "max_client_share_percent", "tls", "http2"});
  if (u["url"]) upstream.url = Expanded(u["url"], "upstream.url");
  if (const YAML::Node fh = u["forwarded_headers"])
    ParseForwardedHeaders(fh, "upstream.forwarded_headers", upstream.forwarded_headers);
  CheckUrl(upstream.url, "upstream.url");
  if (const YAML::Node t = u["tls"]) {
    ParseUpstreamTls(t, "upstream.tls", base_dir, upstream.https(),
                     "needs an https:// upstream.url", upstream);
  }
  ParseLimitsOf(u, "upstream", upstream);
}

bool IsPlainName(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

PassiveHealthConfig ParsePassive(const YAML::Node& n, const std::string& path) {
  RequireMap(n, path);
  OnlyKeys(n, path, {"consecutive_failures", "base_ejection_ms", "max_ejection_ms"});
  PassiveHealthConfig p;
  Set(n, "consecutive_failures", path, p.consecutive_failures, 0, 1'000);
  Set(n, "base_ejection_ms", path, p.base_ejection_ms, 1, 3'600'000);
  Set(n, "max_ejection_ms", path, p.max_ejection_ms, 1, 86'400'000);
  if (p.max_ejection_ms < p.base_ejection_ms) {
    Fail(Join(path, "max_ejection_ms"),
         "must be >= base_ejection_ms (" + std::to_string(p.base_ejection_ms) + ")");
  }
  return p;
}

ActiveHealthConfig ParseActive(const YAML::Node& n, const std::string& path) {
  RequireMap(n, path);
  OnlyKeys(n, path,
           {"path", "interval_ms", "timeout_ms", "unhealthy_threshold", "healthy_threshold",
            "healthy_statuses"});
  ActiveHealthConfig a;
  if (!n["path"]) Fail(Join(path, "path"), "required");
  a.path = Str(n["path"], Join(path, "path"));
  // A request target of its own: origin-form, visible ASCII only.
  if (a.path.empty() || a.path[0] != '/' || std::any_of(a.path.begin(), a.path.end(), [](char c) {
        return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f;
      })) {
    Fail(Join(path, "path"), "must start with / and hold no blanks or control characters");
  }
  Set(n, "interval_ms", path, a.interval_ms, 100, 3'600'000);
  Set(n, "timeout_ms", path, a.timeout_ms, 1, 600'000);
  Set(n, "unhealthy_threshold", path, a.unhealthy_threshold, 1, 100);
  Set(n, "healthy_threshold", path, a.healthy_threshold, 1, 100);
  if (a.timeout_ms >= a.interval_ms) {
    Fail(Join(path, "timeout_ms"),
         "must be below interval_ms (" + std::to_string(a.interval_ms) + ")");
  }
  if (const YAML::Node s = n["healthy_statuses"]) {
    const std::string spath = Join(path, "healthy_statuses");
    if (!s.IsSequence() || s.size() == 0) Fail(spath, "must be a list of statuses");
    for (size_t i = 0; i < s.size(); ++i)
      a.healthy_statuses.push_back(static_cast<int>(Int(s[i], Index(spath, i), 100, 599)));
  }
  return a;
}

std::vector<UpstreamConfig> ParseEndpoints(const YAML::Node& n, const std::string& path,
                                           const UpstreamConfig& settings) {
  if (!n) Fail(path, "required: a list of http:// or https:// urls");
  if (!n.IsSequence() || n.size() == 0 || n.size() > 64)
    Fail(path, "must be a list of 1 to 64 urls");
  std::vector<UpstreamConfig> out;
  std::set<std::string> seen;
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string field = Index(path, i);
    UpstreamConfig e = settings;
    e.url = Expanded(n[i], field);
    // The url is a metric label and a log field as written.
    if (std::any_of(e.url.begin(), e.url.end(), [](char c) {
          return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '"' || c == '\\';
        })) {
      Fail(field, "must hold no blanks, quotes, backslashes or control characters");
    }
    CheckUrl(e.url, field);
    if (!seen.insert(e.url).second) Fail(field, "'" + e.url + "' is listed twice");
    if (!out.empty() && BasePath(e.url) != BasePath(out.front().url)) {
      Fail(field, "every endpoint of a group has the same base path ('" +
                      BasePath(out.front().url) + "' in " + Index(path, 0) + ")");
    }
    out.push_back(std::move(e));
  }
  return out;
}

UpstreamGroupConfig ParseGroup(const YAML::Node& n, const std::string& path,
                               const std::string& base_dir) {
  RequireMap(n, path);
  // The settings of `upstream` but its url, and the group's own.
  OnlyKeys(n, path,
           {"connect_timeout_ms", "timeout_ms", "max_connections", "queue_size", "queue_timeout_ms",
            "forwarded_headers", "max_client_share_percent", "tls", "http2", "endpoints", "balance",
            "passive_health", "active_health"});
  UpstreamGroupConfig g;
  UpstreamConfig settings;
  if (const YAML::Node fh = n["forwarded_headers"])
    ParseForwardedHeaders(fh, Join(path, "forwarded_headers"), settings.forwarded_headers);
  ParseLimitsOf(n, path, settings);
  g.endpoints = ParseEndpoints(n["endpoints"], Join(path, "endpoints"), settings);
  if (const YAML::Node t = n["tls"]) {
    const bool https = std::any_of(g.endpoints.begin(), g.endpoints.end(),
                                   [](const UpstreamConfig& e) { return e.https(); });
    ParseUpstreamTls(t, Join(path, "tls"), base_dir, https, "needs an https:// endpoint", settings);
    for (UpstreamConfig& e : g.endpoints) e.tls = settings.tls;
  }
  if (n["balance"]) g.balance = ParseEnum(n["balance"], Join(path, "balance"), kBalanceNames);
  if (n["passive_health"])
    g.passive = ParsePassive(n["passive_health"], Join(path, "passive_health"));
  if (n["active_health"]) g.active = ParseActive(n["active_health"], Join(path, "active_health"));
  return g;
}

}  // namespace

void ParseUpstreams(const YAML::Node& root, const std::string& base_dir, Config& c) {
  const YAML::Node upstream = root["upstream"];
  if (upstream) ParseUpstream(upstream, base_dir, c.upstream);
  std::vector<UpstreamGroupConfig> named;
  std::optional<UpstreamGroupConfig> given_default;
  if (const YAML::Node groups = root["upstreams"]) {
    RequireMap(groups, "upstreams");
    for (const auto& kv : groups) {
      const std::string name = kv.first.as<std::string>();
      const std::string path = Join("upstreams", name);
      if (!IsPlainName(name)) Fail(path, "a group name is a plain word (letters, digits, - or _)");
      UpstreamGroupConfig g = ParseGroup(kv.second, path, base_dir);
      g.name = name;
      if (name != kDefaultUpstream) {
        named.push_back(std::move(g));
      } else if (upstream) {
        Fail(path, "the upstream section is the default group already: give one of them");
      } else {
        given_default = std::move(g);
      }
    }
  }
  c.upstreams.clear();
  if (given_default) {
    c.upstream = given_default->endpoints.front();
    c.upstreams.push_back(std::move(*given_default));
  } else {
    // One upstream, as before groups: never ejected (a 502 names its failure instead).
    c.upstreams.push_back({.name = std::string(kDefaultUpstream),
                           .endpoints = {c.upstream},
                           .passive = {.consecutive_failures = 0}});
  }
  for (UpstreamGroupConfig& g : named) c.upstreams.push_back(std::move(g));
}

void ResolveRouteUpstreams(Config& c) {
  for (size_t i = 0; i < c.routes.size(); ++i) {
    RouteConfig& r = c.routes[i];
    const auto it =
        std::find_if(c.upstreams.begin(), c.upstreams.end(),
                     [&r](const UpstreamGroupConfig& g) { return g.name == r.upstream; });
    if (it == c.upstreams.end()) {
      std::string names;
      for (const UpstreamGroupConfig& g : c.upstreams)
        names += (names.empty() ? "" : ", ") + g.name;
      Fail(Join(Index("routes", i), "upstream"),
           "no upstream group '" + r.upstream + "' (the groups: " + names + ")");
    }
    r.upstream_index = static_cast<size_t>(it - c.upstreams.begin());
  }
}

}  // namespace tollgate::config::internal
