#include <tollgate/config/config.hpp>

#include <openssl/evp.h>

#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace tollgate::config {
namespace {

// Thrown inside the loader only (start-up and reload, never the request path).
struct FieldError {
  std::string path;
  std::string message;
};

[[noreturn]] void Fail(const std::string& path, const std::string& message) {
  throw FieldError{path, message};
}

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}
std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

void RequireMap(const YAML::Node& n, const std::string& path) {
  if (!n.IsMap()) Fail(path, "must be a mapping");
}

// Refuses unknown keys: a misspelt field must not be silently ignored.
void OnlyKeys(const YAML::Node& n, const std::string& path, std::set<std::string> allowed) {
  RequireMap(n, path);
  for (const auto& kv : n) {
    const std::string k = kv.first.as<std::string>();
    if (!allowed.count(k)) Fail(Join(path, k), "unknown field");
  }
}

std::string Str(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) Fail(path, "must be a string");
  return n.as<std::string>();
}

// A name that reaches HTTP fields (key ids, accounts, plan and limit names): a CR/LF in one
// would inject header lines into every upstream request of that key.
std::string Name(const YAML::Node& n, const std::string& path) {
  std::string s = Str(n, path);
  if (!IsFieldSafe(s)) Fail(path, "must not contain control characters (CR, LF, NUL, ...)");
  return s;
}

// RFC 9110 token: a header name.
bool IsToken(std::string_view s) {
  static constexpr std::string_view kSpecials = "!#$%&'*+-.^_`|~";
  if (s.empty()) return false;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (!std::isalnum(c) && kSpecials.find(ch) == std::string_view::npos) return false;
  }
  return true;
}


int64_t Int(const YAML::Node& n, const std::string& path, int64_t min, int64_t max) {
  if (!n.IsScalar()) Fail(path, "must be an integer");
  const std::string s = n.as<std::string>();
  int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range) Fail(path, "out of range: " + s);
  if (ec != std::errc() || p != s.data() + s.size()) Fail(path, "must be an integer, got '" + s + "'");
  if (v < min) Fail(path, "must be >= " + std::to_string(min) + ", got " + s);
  if (v > max) Fail(path, "must be <= " + std::to_string(max) + ", got " + s);
  return v;
}

bool Bool(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) Fail(path, "must be true or false");
  const std::string s = n.as<std::string>();
  if (s == "true") return true;
  if (s == "false") return false;
  Fail(path, "must be true or false, got '" + s + "'");
}

TargetConfig ParseTarget(const YAML::Node& n, const std::string& path) {
  OnlyKeys(n, path, {"allow_encoded_slash", "allow_path_parameters"});
  TargetConfig t;
  if (n["allow_encoded_slash"]) t.allow_encoded_slash = Bool(n["allow_encoded_slash"], Join(path, "allow_encoded_slash"));
  if (n["allow_path_parameters"]) {
    t.allow_path_parameters = Bool(n["allow_path_parameters"], Join(path, "allow_path_parameters"));
  }
  return t;
}

template <class T>
void Set(const YAML::Node& parent, const char* key, const std::string& path, T& out, int64_t min,
         int64_t max) {
  if (const YAML::Node n = parent[key]) out = static_cast<T>(Int(n, Join(path, key), min, max));
}

Mode ParseMode(const YAML::Node& n, const std::string& path) {
  const std::string s = Str(n, path);
  if (s == "enforce") return Mode::kEnforce;
  if (s == "shadow") return Mode::kShadow;
  Fail(path, "must be enforce or shadow, got '" + s + "'");
}

// "2026-12-31" or "2026-12-31T23:00:00Z" (UTC).
int64_t ParseExpiry(const std::string& s, const std::string& path) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  char tail = 0;
  const int n = std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &y, &mo, &d, &h, &mi, &sec, &tail);
  const bool date_only = n == 3 && s.size() == 10;
  const bool full = n == 7 && tail == 'Z';
  if (!(date_only || full) || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) {
    Fail(path, "must be a UTC date (2026-12-31) or time (2026-12-31T23:00:00Z), got '" + s + "'");
  }
  return core::DaysFromCivil({y, mo, d}) * 86'400 + h * 3600 + mi * 60 + sec;
}

const std::set<std::string> kLimitFields = {
    "name", "algorithm", "capacity", "refill_per_second", "refill_per_minute", "refill_per_hour",
    "limit", "window_seconds", "period", "allowance", "ceiling"};

// Reads the limit fields present in `n` into `spec` (which may hold a plan's values already,
// for overrides), then validates the result.
void ReadLimitFields(const YAML::Node& n, const std::string& path, core::LimitSpec& spec) {
  constexpr int64_t kMax = int64_t{1} << 53;
  if (const YAML::Node a = n["algorithm"]) {
    auto alg = core::ParseAlgorithm(Str(a, Join(path, "algorithm")));
    if (!alg) Fail(Join(path, "algorithm"), alg.error().substr(alg.error().find(':') + 2));
    spec.algorithm = *alg;
  }
  Set(n, "capacity", path, spec.capacity, 1, kMax);
  Set(n, "limit", path, spec.limit, 1, kMax);
  int rates = 0;
  for (auto [key, seconds] : {std::pair{"refill_per_second", 1}, {"refill_per_minute", 60},
                              {"refill_per_hour", 3600}}) {
    if (const YAML::Node r = n[key]) {
      ++rates;
      auto rate = core::Rate::Parse(Str(r, Join(path, key)), seconds);
      if (!rate) Fail(Join(path, key), rate.error());
      spec.refill = *rate;
    }
  }
  if (rates > 1) Fail(path, "give one of refill_per_second, refill_per_minute, refill_per_hour");
  if (const YAML::Node w = n["window_seconds"]) {
    const std::string s = Str(w, Join(path, "window_seconds"));
    auto r = core::Rate::Parse(s, 1);  // a positive decimal with at most 6 decimals
    if (!r) Fail(Join(path, "window_seconds"), r.error());
    // tokens/per_micros was reduced; the window in microseconds is the decimal times 1e6.
    const __int128 us = static_cast<__int128>(r->tokens) * 1'000'000 * 1'000'000 / r->per_micros;
    if (us > kMax) Fail(Join(path, "window_seconds"), "too large");
    spec.window = core::Duration::Micros(static_cast<int64_t>(us));
  }
  if (const YAML::Node p = n["period"]) {
    const std::string s = Str(p, Join(path, "period"));
    if (s == "day") spec.period = core::Period::kDay;
    else if (s == "month") spec.period = core::Period::kMonth;
    else Fail(Join(path, "period"), "must be day or month, got '" + s + "'");
  }
  if (const YAML::Node a = n["allowance"]) spec.allowance = Int(a, Join(path, "allowance"), 1, kMax);
  if (const YAML::Node c = n["ceiling"]) spec.ceiling = Int(c, Join(path, "ceiling"), 1, kMax);

  // Fields that do not belong to the algorithm are mistakes, not silently ignored.
  using core::Algorithm;
  const Algorithm alg = spec.algorithm;
  auto forbid = [&](const char* key, bool applies) {
    if (n[key] && !applies) {
      Fail(Join(path, key), std::string("does not apply to algorithm ") +
                                std::string(core::AlgorithmName(alg)));
    }
  };
  const bool bucket = alg == Algorithm::kTokenBucket;
  const bool window = alg == Algorithm::kSlidingWindowLog ||
                      alg == Algorithm::kSlidingWindowCounter || alg == Algorithm::kFixedWindow;
  const bool quota = alg == Algorithm::kQuota;
  forbid("capacity", bucket);
  forbid("refill_per_second", bucket);
  forbid("refill_per_minute", bucket);
  forbid("refill_per_hour", bucket);
  forbid("limit", window);
  forbid("window_seconds", window);
  forbid("period", quota);
  forbid("allowance", quota);
  forbid("ceiling", quota);
  if (bucket && spec.capacity == 0) Fail(Join(path, "capacity"), "required for token_bucket");
  if (bucket && spec.refill.tokens == 0) Fail(Join(path, "refill_per_second"), "required for token_bucket");
  if (window && spec.limit == 0) Fail(Join(path, "limit"), "required for " + std::string(core::AlgorithmName(alg)));
  if (window && spec.window.micros() == 0) Fail(Join(path, "window_seconds"), "required for " + std::string(core::AlgorithmName(alg)));

  auto limit = core::Limit::Create(spec);
  if (!limit) {
    const std::string& e = limit.error();
    const size_t colon = e.find(": ");
    if (colon == std::string::npos) Fail(path, e);
    Fail(Join(path, e.substr(0, colon)), e.substr(colon + 2));
  }
}

// `plan_limit`: a plan's limit, which may take its limit from the key (`from_key`).
LimitConfig ParseLimit(const YAML::Node& n, const std::string& path, bool plan_limit) {
  std::set<std::string> allowed = kLimitFields;
  allowed.insert("from_key");
  OnlyKeys(n, path, allowed);
  LimitConfig l;
  if (!n["name"]) Fail(Join(path, "name"), "required");
  l.name = Name(n["name"], Join(path, "name"));
  if (l.name.empty() || l.name.find_first_of(" \t\",;:{}") != std::string::npos) {
    Fail(Join(path, "name"), "must be a plain word (letters, digits, - or _)");
  }
  ReadLimitFields(n, path, l.spec);
  if (const YAML::Node f = n["from_key"]) {
    const std::string fpath = Join(path, "from_key");
    if (!plan_limit) Fail(fpath, "only plan limits can take their limit from the key");
    l.from_key = Bool(f, fpath);
    using core::Algorithm;
    const Algorithm alg = l.spec.algorithm;
    if (l.from_key && alg != Algorithm::kSlidingWindowLog && alg != Algorithm::kSlidingWindowCounter &&
        alg != Algorithm::kFixedWindow) {
      Fail(fpath, std::string("does not apply to algorithm ") + std::string(core::AlgorithmName(alg)) +
                      " (the key's columns are a request count per minute)");
    }
    // rate_limit_per_minute + rate_limit_burst is a count over one minute (issue 5).
    if (l.from_key && l.spec.window.micros() != 60'000'000) {
      Fail(Join(path, "window_seconds"), "must be 60 with from_key (the key's columns are per minute)");
    }
  }
  return l;
}

std::vector<LimitConfig> ParseLimits(const YAML::Node& n, const std::string& path, bool plan_limits) {
  if (!n.IsSequence()) Fail(path, "must be a list of limits");
  std::vector<LimitConfig> out;
  std::set<std::string> names;
  for (size_t i = 0; i < n.size(); ++i) {
    out.push_back(ParseLimit(n[i], Index(path, i), plan_limits));
    if (!names.insert(out.back().name).second) Fail(Join(Index(path, i), "name"), "duplicate '" + out.back().name + "'");
  }
  if (out.size() > 8) Fail(path, "at most 8 limits");
  return out;
}

std::vector<std::string> StrList(const YAML::Node& n, const std::string& path) {
  if (!n.IsSequence()) Fail(path, "must be a list");
  std::vector<std::string> out;
  for (size_t i = 0; i < n.size(); ++i) out.push_back(Str(n[i], Index(path, i)));
  return out;
}

// The overrides of a key on plan `plan_name` (`plan`: null when unknown) under `path`: a map of
// limit name -> fields. The YAML loader and ParseOverrides (other key sources) share it.
std::vector<OverrideConfig> ReadOverrides(const YAML::Node& o, const std::string& path,
                                          const std::string& plan_name, const PlanConfig* plan) {
  RequireMap(o, path);
  std::vector<OverrideConfig> out;
  for (const auto& kv : o) {
    const std::string name = kv.first.as<std::string>();
    const std::string opath = Join(path, name);
    const LimitConfig* base = nullptr;
    if (plan) for (const auto& l : plan->limits) if (l.name == name) base = &l;
    if (!base) Fail(opath, "plan '" + plan_name + "' has no limit named '" + name + "'");
    std::set<std::string> allowed = kLimitFields;
    allowed.erase("name");
    allowed.erase("algorithm");
    allowed.insert("expires");
    OnlyKeys(kv.second, opath, allowed);
    OverrideConfig ov;
    ov.limit = name;
    ov.spec = base->spec;
    ReadLimitFields(kv.second, opath, ov.spec);
    if (const YAML::Node e = kv.second["expires"]) {
      ov.expires_unix_s = ParseExpiry(Str(e, Join(opath, "expires")), Join(opath, "expires"));
    }
    out.push_back(ov);
  }
  return out;
}

// Fails with the field path of KeyWindowLimit's error under `path`.
void CheckKeyWindowLimit(int64_t per_minute, int64_t burst, const std::string& path) {
  auto limit = KeyWindowLimit(per_minute, burst);
  if (limit) return;
  const std::string& e = limit.error();
  const size_t colon = e.find(": ");
  if (colon == std::string::npos) Fail(path, e);
  Fail(Join(path, e.substr(0, colon)), e.substr(colon + 2));
}

KeyConfig ParseKey(const YAML::Node& n, const std::string& path, const Config& c) {
  OnlyKeys(n, path, {"key", "sha256", "id", "account", "plan", "overrides", "rate_limit_per_minute",
                     "rate_limit_burst"});
  KeyConfig k;
  if (n["key"] && n["sha256"]) Fail(path, "give key or sha256, not both");
  if (const YAML::Node key = n["key"]) {
    const std::string clear = Str(key, Join(path, "key"));
    if (clear.empty()) Fail(Join(path, "key"), "must not be empty");
    k.sha256_hex = Sha256Hex(clear);
  } else if (const YAML::Node d = n["sha256"]) {
    k.sha256_hex = Str(d, Join(path, "sha256"));
    for (char& ch : k.sha256_hex) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (k.sha256_hex.size() != 64 || k.sha256_hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
      Fail(Join(path, "sha256"), "must be 64 hex digits");
    }
  } else {
    Fail(path, "key or sha256 is required");
  }
  if (!n["id"]) Fail(Join(path, "id"), "required");
  k.id = Name(n["id"], Join(path, "id"));
  if (k.id.empty()) Fail(Join(path, "id"), "must not be empty");
  k.account = n["account"] ? Name(n["account"], Join(path, "account")) : k.id;
  if (!n["plan"]) Fail(Join(path, "plan"), "required");
  k.plan = Name(n["plan"], Join(path, "plan"));
  // An unknown plan is not an error: the key gets the strictest plan (DESIGN.md).
  if (const YAML::Node o = n["overrides"]) {
    const PlanConfig* plan = nullptr;
    for (const auto& p : c.plans) if (p.name == k.plan) plan = &p;
    k.overrides = ReadOverrides(o, Join(path, "overrides"), k.plan, plan);
  }
  const YAML::Node per_minute = n["rate_limit_per_minute"];
  const YAML::Node burst = n["rate_limit_burst"];
  if (per_minute || burst) {
    if (!per_minute || !burst) Fail(path, "give both rate_limit_per_minute and rate_limit_burst, or neither");
    k.rate_limit_per_minute = Int(per_minute, Join(path, "rate_limit_per_minute"), INT64_MIN, INT64_MAX);
    k.rate_limit_burst = Int(burst, Join(path, "rate_limit_burst"), INT64_MIN, INT64_MAX);
    CheckKeyWindowLimit(*k.rate_limit_per_minute, *k.rate_limit_burst, path);
  }
  return k;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Config Parse(const YAML::Node& root, const std::string& base_dir) {
  Config c;
  if (!root || root.IsNull()) Fail("", "the configuration is empty");
  OnlyKeys(root, "", {"server", "upstream", "store", "mode", "identity", "plans", "keys",
                      "keys_file", "routes", "anonymous", "headers", "decision", "rls"});
  if (const YAML::Node s = root["server"]) {
    OnlyKeys(s, "server", {"listen", "admin_listen", "threads", "max_connections",
                           "max_connections_per_address", "admin_max_connections", "max_header_bytes",
                           "max_body_bytes", "header_timeout_ms", "idle_timeout_ms",
                           "drain_timeout_ms", "access_log", "request_target"});
    if (s["listen"]) c.server.listen = Str(s["listen"], "server.listen");
    if (s["admin_listen"]) c.server.admin_listen = Str(s["admin_listen"], "server.admin_listen");
    Set(s, "threads", "server", c.server.threads, 0, 256);
    Set(s, "max_connections", "server", c.server.max_connections, 0, 1'000'000);
    Set(s, "max_connections_per_address", "server", c.server.max_connections_per_address, 0, 1'000'000);
    Set(s, "admin_max_connections", "server", c.server.admin_max_connections, 1, 10'000);
    if (s["request_target"]) c.server.request_target = ParseTarget(s["request_target"], "server.request_target");
    Set(s, "max_header_bytes", "server", c.server.max_header_bytes, 1024, 1 << 20);
    Set(s, "max_body_bytes", "server", c.server.max_body_bytes, 0, int64_t{1} << 40);
    Set(s, "header_timeout_ms", "server", c.server.header_timeout_ms, 1, 3'600'000);
    Set(s, "idle_timeout_ms", "server", c.server.idle_timeout_ms, 1, 3'600'000);
    Set(s, "drain_timeout_ms", "server", c.server.drain_timeout_ms, 0, 3'600'000);
    if (s["access_log"]) c.server.access_log = Bool(s["access_log"], "server.access_log");
  }
  if (const YAML::Node u = root["upstream"]) {
    OnlyKeys(u, "upstream", {"url", "connect_timeout_ms", "timeout_ms", "max_connections", "queue_size",
                             "queue_timeout_ms"});
    if (u["url"]) c.upstream.url = Str(u["url"], "upstream.url");
    if (c.upstream.url.rfind("http://", 0) != 0) Fail("upstream.url", "must start with http://");
    Set(u, "connect_timeout_ms", "upstream", c.upstream.connect_timeout_ms, 1, 600'000);
    Set(u, "timeout_ms", "upstream", c.upstream.timeout_ms, 1, 3'600'000);
    Set(u, "max_connections", "upstream", c.upstream.max_connections, 1, 100'000);
    Set(u, "queue_size", "upstream", c.upstream.queue_size, 0, 1'000'000);
    Set(u, "queue_timeout_ms", "upstream", c.upstream.queue_timeout_ms, 1, 600'000);
  }
  if (const YAML::Node s = root["store"]) {
    OnlyKeys(s, "store", {"type", "max_keys", "prefix", "url", "timeout_ms", "connect_timeout_ms",
                          "deny_cache", "tls"});
    if (s["type"]) c.store.type = Str(s["type"], "store.type");
    if (c.store.type != "memory" && c.store.type != "redis") {
      Fail("store.type", "must be memory or redis, got '" + c.store.type + "'");
    }
    Set(s, "max_keys", "store", c.store.max_keys, 1, int64_t{1} << 32);
    if (s["prefix"]) c.store.prefix = Str(s["prefix"], "store.prefix");
    if (s["url"]) c.store.url = Str(s["url"], "store.url");
    Set(s, "timeout_ms", "store", c.store.timeout_ms, 1, 60'000);
    Set(s, "connect_timeout_ms", "store", c.store.connect_timeout_ms, 1, 60'000);
    if (s["deny_cache"]) c.store.deny_cache = Bool(s["deny_cache"], "store.deny_cache");
    if (c.store.prefix.empty()) Fail("store.prefix", "must not be empty");
    if (const YAML::Node t = s["tls"]) {
      OnlyKeys(t, "store.tls", {"ca_file", "cert_file", "key_file"});
      // Read here too, so that check-config finds a missing file; the store parses them.
      auto file = [&t](const char* name, std::string& out) {
        if (!t[name]) return;
        const std::string field = std::string("store.tls.") + name;
        out = Str(t[name], field);
        if (!std::ifstream(out).good()) Fail(field, "cannot read '" + out + "'");
      };
      file("ca_file", c.store.tls_ca_file);
      file("cert_file", c.store.tls_cert_file);
      file("key_file", c.store.tls_key_file);
      if (c.store.tls_cert_file.empty() != c.store.tls_key_file.empty()) {
        Fail("store.tls", "cert_file and key_file go together");
      }
      if (c.store.url.rfind("rediss", 0) != 0) Fail("store.tls", "needs a rediss:// or rediss-cluster:// url");
    }
  }
  if (c.store.type == "redis" && c.store.url.empty()) Fail("store.url", "required for store.type redis");
  if (root["mode"]) c.mode = ParseMode(root["mode"], "mode");
  c.identity.invalid_key_limit = {.algorithm = core::Algorithm::kTokenBucket,
                                  .capacity = 10,
                                  .refill = *core::Rate::Parse("0.2", 1)};
  if (const YAML::Node id = root["identity"]) {
    OnlyKeys(id, "identity", {"api_key_headers", "trusted_proxies", "invalid_key_limit"});
    if (id["api_key_headers"]) {
      c.identity.api_key_headers = StrList(id["api_key_headers"], "identity.api_key_headers");
      if (c.identity.api_key_headers.empty()) Fail("identity.api_key_headers", "must not be empty");
      for (size_t i = 0; i < c.identity.api_key_headers.size(); ++i) {
        if (!IsToken(c.identity.api_key_headers[i])) {
          Fail(Index("identity.api_key_headers", i), "must be a header name (letters, digits, -, ...)");
        }
      }
    }
    if (id["trusted_proxies"]) c.identity.trusted_proxies = StrList(id["trusted_proxies"], "identity.trusted_proxies");
    if (const YAML::Node l = id["invalid_key_limit"]) {
      std::set<std::string> allowed = kLimitFields;
      allowed.erase("name");
      OnlyKeys(l, "identity.invalid_key_limit", allowed);
      ReadLimitFields(l, "identity.invalid_key_limit", c.identity.invalid_key_limit);
    }
  }
  if (const YAML::Node plans = root["plans"]) {
    RequireMap(plans, "plans");
    for (const auto& kv : plans) {
      const std::string name = kv.first.as<std::string>();
      const std::string path = Join("plans", name);
      if (!IsFieldSafe(name) || name.empty()) Fail(path, "a plan name must not be empty or contain control characters");
      OnlyKeys(kv.second, path, {"mode", "scope", "limits"});
      PlanConfig p;
      p.name = name;
      if (kv.second["mode"]) p.mode = ParseMode(kv.second["mode"], Join(path, "mode"));
      if (kv.second["scope"]) {
        p.scope = Str(kv.second["scope"], Join(path, "scope"));
        if (p.scope != "key" && p.scope != "account") Fail(Join(path, "scope"), "must be key or account");
      }
      if (!kv.second["limits"]) Fail(Join(path, "limits"), "required");
      p.limits = ParseLimits(kv.second["limits"], Join(path, "limits"), true);
      c.plans.push_back(std::move(p));
    }
  }
  if (c.plans.empty()) Fail("plans", "at least one plan is required");

  YAML::Node keys = root["keys"];
  std::string keys_path = "keys";
  if (keys && keys.IsMap()) {
    // keys: {source: postgres, url: ..., snapshot: ..., resync_seconds: ...}
    OnlyKeys(keys, "keys", {"source", "url", "snapshot", "resync_seconds"});
    KeySourceConfig& ks = c.key_source;
    ks.source = keys["source"] ? Str(keys["source"], "keys.source") : "";
    if (ks.source != "postgres") Fail("keys.source", "must be postgres (or give keys as a list)");
    if (!keys["url"]) Fail("keys.url", "required for keys.source postgres");
    ks.url = Str(keys["url"], "keys.url");
    if (keys["snapshot"]) {
      ks.snapshot = Str(keys["snapshot"], "keys.snapshot");
      if (!ks.snapshot.empty() && ks.snapshot[0] != '/') ks.snapshot = base_dir + "/" + ks.snapshot;
    }
    Set(keys, "resync_seconds", "keys", ks.resync_seconds, 1, 86'400);
    if (root["keys_file"]) Fail("keys_file", "give keys_file or keys.source, not both");
    keys.reset(YAML::Node(YAML::NodeType::Undefined));  // rebind: `keys = ...` writes into root["keys"]
  }
  if (const YAML::Node kf = root["keys_file"]) {
    if (keys) Fail("keys_file", "give keys or keys_file, not both");
    std::string file = Str(kf, "keys_file");
    if (!file.empty() && file[0] != '/') file = base_dir + "/" + file;
    const std::string text = ReadFile(file);
    if (text.empty()) Fail("keys_file", "cannot read '" + file + "'");
    try {
      keys = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      Fail("keys_file", file + ": " + e.what());
    }
    keys_path = file;
  }
  if (keys) {
    if (!keys.IsSequence()) Fail(keys_path, "must be a list of keys");
    std::set<std::string> ids, digests;
    for (size_t i = 0; i < keys.size(); ++i) {
      c.keys.push_back(ParseKey(keys[i], Index(keys_path, i), c));
      if (!ids.insert(c.keys.back().id).second) Fail(Join(Index(keys_path, i), "id"), "duplicate '" + c.keys.back().id + "'");
      if (!digests.insert(c.keys.back().sha256_hex).second) Fail(Index(keys_path, i), "duplicate key");
    }
  }
  if (const YAML::Node routes = root["routes"]) {
    if (!routes.IsSequence()) Fail("routes", "must be a list");
    for (size_t i = 0; i < routes.size(); ++i) {
      const std::string path = Index("routes", i);
      const YAML::Node r = routes[i];
      OnlyKeys(r, path, {"path", "method", "cost", "fail_mode", "identity"});
      RouteConfig rc;
      if (!r["path"]) Fail(Join(path, "path"), "required");
      rc.path = Name(r["path"], Join(path, "path"));
      if (rc.path.empty() || rc.path[0] != '/') Fail(Join(path, "path"), "must start with /");
      if (r["method"]) {
        rc.method = Str(r["method"], Join(path, "method"));
        if (!IsToken(rc.method)) Fail(Join(path, "method"), "must be a method name (GET, POST, ...)");
      }
      if (const YAML::Node cost = r["cost"]) {
        if (cost.IsScalar()) {
          rc.cost.fixed = Int(cost, Join(path, "cost"), 1, int64_t{1} << 40);
        } else {
          OnlyKeys(cost, Join(path, "cost"), {"query", "per", "min"});
          if (!cost["query"]) Fail(Join(path, "cost.query"), "required");
          rc.cost.query = Str(cost["query"], Join(path, "cost.query"));
          Set(cost, "per", Join(path, "cost"), rc.cost.per, 1, int64_t{1} << 40);
          Set(cost, "min", Join(path, "cost"), rc.cost.min, 1, int64_t{1} << 40);
        }
      }
      if (const YAML::Node f = r["fail_mode"]) {
        const std::string s = Str(f, Join(path, "fail_mode"));
        if (s == "open") rc.fail_mode = FailMode::kOpen;
        else if (s == "closed") rc.fail_mode = FailMode::kClosed;
        else Fail(Join(path, "fail_mode"), "must be open or closed, got '" + s + "'");
      }
      if (const YAML::Node id = r["identity"]) {
        const std::string s = Str(id, Join(path, "identity"));
        if (s == "key") rc.identity = RouteIdentity::kKey;
        else if (s == "ip") rc.identity = RouteIdentity::kIp;
        else if (s == "none") rc.identity = RouteIdentity::kNone;
        else Fail(Join(path, "identity"), "must be key, ip or none, got '" + s + "'");
      }
      c.routes.push_back(std::move(rc));
    }
  }
  if (const YAML::Node a = root["anonymous"]) {
    OnlyKeys(a, "anonymous", {"limits"});
    if (a["limits"]) c.anonymous = ParseLimits(a["limits"], "anonymous.limits", false);
  }
  if (const YAML::Node d = root["decision"]) {
    OnlyKeys(d, "decision", {"listen", "deny_status", "proxy", "request_target"});
    if (d["listen"]) c.decision.listen = Str(d["listen"], "decision.listen");
    Set(d, "deny_status", "decision", c.decision.deny_status, 400, 599);
    if (d["proxy"]) {
      const std::string p = Str(d["proxy"], "decision.proxy");
      if (p == "nginx") c.decision.proxy = DecisionProxy::kNginx;
      else if (p == "traefik") c.decision.proxy = DecisionProxy::kTraefik;
      else if (p == "envoy") c.decision.proxy = DecisionProxy::kEnvoy;
      else Fail("decision.proxy", "must be nginx, traefik or envoy, got '" + p + "'");
    }
    if (d["request_target"]) c.decision.request_target = ParseTarget(d["request_target"], "decision.request_target");
  }
  if (const YAML::Node r = root["rls"]) {
    OnlyKeys(r, "rls", {"listen", "domains"});
    if (r["listen"]) c.rls.listen = Str(r["listen"], "rls.listen");
    if (const YAML::Node ds = r["domains"]) {
      if (!ds.IsSequence()) Fail("rls.domains", "must be a list");
      for (size_t i = 0; i < ds.size(); ++i) {
        const std::string path = Index("rls.domains", i);
        OnlyKeys(ds[i], path, {"domain", "key_entry", "ip_entry"});
        RlsDomainConfig dc;
        if (!ds[i]["domain"]) Fail(Join(path, "domain"), "required");
        dc.domain = Str(ds[i]["domain"], Join(path, "domain"));
        if (ds[i]["key_entry"]) dc.key_entry = Str(ds[i]["key_entry"], Join(path, "key_entry"));
        if (ds[i]["ip_entry"]) dc.ip_entry = Str(ds[i]["ip_entry"], Join(path, "ip_entry"));
        if (dc.key_entry.empty() && dc.ip_entry.empty()) Fail(path, "give key_entry or ip_entry");
        c.rls.domains.push_back(std::move(dc));
      }
    }
  }
  if (const YAML::Node h = root["headers"]) {
    const auto sets = StrList(h, "headers");
    c.headers = {false, false, false};
    for (size_t i = 0; i < sets.size(); ++i) {
      if (sets[i] == "ietf") c.headers.ietf = true;
      else if (sets[i] == "ratelimit") c.headers.ratelimit = true;
      else if (sets[i] == "x-ratelimit") c.headers.x_ratelimit = true;
      else Fail(Index("headers", i), "must be ietf, ratelimit or x-ratelimit, got '" + sets[i] + "'");
    }
  }
  return c;
}

}  // namespace

core::Result<int64_t> KeyWindowLimit(int64_t rate_limit_per_minute, int64_t rate_limit_burst) {
  // The same bound as every other configured count; the two together must fit as well.
  constexpr int64_t kMax = int64_t{1} << 53;
  if (rate_limit_per_minute < 1) {
    return core::Error{"rate_limit_per_minute: must be >= 1, got " + std::to_string(rate_limit_per_minute)};
  }
  if (rate_limit_burst < 0) {
    return core::Error{"rate_limit_burst: must be >= 0, got " + std::to_string(rate_limit_burst)};
  }
  if (rate_limit_per_minute > kMax) {
    return core::Error{"rate_limit_per_minute: must be <= " + std::to_string(kMax) + ", got " +
                       std::to_string(rate_limit_per_minute)};
  }
  if (rate_limit_burst > kMax - rate_limit_per_minute) {
    return core::Error{"rate_limit_burst: rate_limit_per_minute + rate_limit_burst must be <= " +
                       std::to_string(kMax)};
  }
  return rate_limit_per_minute + rate_limit_burst;
}

core::Result<std::vector<OverrideConfig>> ParseOverrides(const OverrideFields& overrides,
                                                         const PlanConfig& plan) {
  // The fields go through the YAML loader's own code: one implementation of what an override
  // may say (STYLE.md, habit 7).
  YAML::Node node(YAML::NodeType::Map);
  for (const auto& [name, fields] : overrides) {
    YAML::Node body(YAML::NodeType::Map);
    for (const auto& [field, value] : fields) body[field] = value;
    node[name] = body;
  }
  try {
    return ReadOverrides(node, "", plan.name, &plan);
  } catch (const FieldError& e) {
    return core::Error{e.path.empty() ? e.message : e.path + ": " + e.message};
  } catch (const YAML::Exception& e) {
    return core::Error{std::string("invalid overrides: ") + e.what()};
  }
}

bool IsFieldSafe(std::string_view text) {
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

std::string Sha256Raw(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(digest), len);
}

std::string Sha256Hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (size_t i = 0; i < len; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
}

core::Result<Config> ParseConfig(const std::string& yaml_text, const std::string& base_dir) {
  try {
    return Parse(YAML::Load(yaml_text), base_dir);
  } catch (const FieldError& e) {
    return core::Error{e.path.empty() ? e.message : e.path + ": " + e.message};
  } catch (const YAML::Exception& e) {
    return core::Error{std::string("invalid YAML: ") + e.what()};
  }
}

core::Result<Config> LoadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return core::Error{"cannot read config file '" + path + "'"};
  std::stringstream ss;
  ss << in.rdbuf();
  const size_t slash = path.rfind('/');
  return ParseConfig(ss.str(), slash == std::string::npos ? "." : path.substr(0, slash));
}

}  // namespace tollgate::config
