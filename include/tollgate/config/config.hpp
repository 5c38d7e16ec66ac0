// The configuration file as plain structs. Every field documents its default; the loader
// validates shapes and names the field path of any error. See docs/configuration.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <tollgate/core/limit.hpp>
#include <tollgate/core/result.hpp>
#include <tollgate/util/name_table.hpp>

namespace tollgate::config {

// How a listener treats request targets that the canonical form cannot carry unchanged
// (docs/http-contract.md, "The request target"). Both default to refusing with 400.
struct TargetConfig {
  bool allow_encoded_slash = false;    // %2F and %5C in the path: kept encoded instead of 400
  bool allow_path_parameters = false;  // ';' in the path: kept instead of 400
};

// TLS on a listener (`server.tls`, `server.admin_tls`; issue 33). Off while no certificate is
// given. The files are read again on SIGHUP, on POST /admin/reload and when they change (checked
// every reload_check_ms); a set that cannot be loaded is refused and the one before keeps serving.
// The other fields are read at start only.
struct TlsConfig {
  struct Certificate {
    std::string cert_file;  // the leaf, then its intermediates (PEM)
    std::string key_file;   // PEM, unencrypted
  };
  std::vector<Certificate> certificates;  // chosen by SNI; the first is the default
  int min_version = 12;                   // 12: TLS 1.2, 13: TLS 1.3 (`min_version: "1.2"`)
  std::string ciphers;       // TLS 1.2, OpenSSL's syntax; empty: Mozilla's "intermediate"
  std::string ciphersuites;  // TLS 1.3; empty: OpenSSL's
  // A client asking (SNI) for a name no certificate covers: the default certificate
  // (`unknown_names: default`), or a refused handshake (`refuse`).
  bool refuse_unknown_names = false;
  bool session_tickets = true;
  // Client certificates (mTLS, `client_certificates`): not asked for, asked for (a client may
  // send none; one it sends must verify), or required. Verified against client_ca_file (PEM),
  // read again with the certificates.
  enum class ClientAuth { kOff, kOptional, kRequired } client_auth = ClientAuth::kOff;
  std::string client_ca_file;
  int handshake_timeout_ms = 10'000;  // a handshake not done by then is closed
  int reload_check_ms = 500;          // how often the files are checked for a change
  bool enabled() const { return !certificates.empty(); }
};

// HTTP/2 on the gateway listener (issue 34, docs/configuration.md "server.http2"): `h2` chosen by
// ALPN on a TLS listener, `h2c` with prior knowledge on a plaintext one. Each stream is one
// request through the same exchange as HTTP/1.1. Read at start only.
struct Http2Config {
  bool enabled = true;  // ALPN offers h2 (then http/1.1) on the gateway's TLS listener
  bool h2c = true;      // a plaintext connection opening with the HTTP/2 preface is served as h2c
  uint32_t max_concurrent_streams = 100;  // SETTINGS_MAX_CONCURRENT_STREAMS; 1-10,000
  // SETTINGS_HEADER_TABLE_SIZE: the HPACK table the client's encoder may use. 0-65,536.
  uint32_t header_table_bytes = 4096;
  uint32_t initial_window_bytes = 65'535;      // per stream: request body bytes in flight
  uint32_t connection_window_bytes = 1 << 20;  // all streams together
  // Floods: past these counts within flood_interval_ms the connection gets GOAWAY
  // (ENHANCE_YOUR_CALM) and is closed. Resets: RST_STREAM frames from the client (rapid reset,
  // CVE-2023-44487). Control frames: SETTINGS, PING, PRIORITY, WINDOW_UPDATE and empty DATA
  // frames without END_STREAM.
  uint32_t max_resets = 200;
  uint32_t max_control_frames = 1'000;
  int flood_interval_ms = 10'000;
  // Header blocks of one stream (the first and any trailers) past this many CONTINUATION frames
  // end the connection (a CONTINUATION flood).
  uint32_t max_continuations = 16;
};

struct ServerConfig {
  std::string listen = "127.0.0.1:8080";        // host:port of the gateway
  std::string admin_listen = "127.0.0.1:9090";  // host:port of the admin API; loopback by default
  int threads = 0;                              // io threads; 0 = one per core
  // Client connections of the gateway and decision listeners, per process; more are closed at
  // accept. 0 (default): derived at start from the file-descriptor limit (RLIMIT_NOFILE, whose
  // soft limit is raised to the hard one), leaving room for upstream, store and admin sockets,
  // and at most 10,000. A configured value above what the limit allows is lowered, with a warning.
  size_t max_connections = 0;
  // Open connections from one client address (the TCP peer); more are closed at accept.
  // Peers in identity.trusted_proxies are exempt (a load balancer is many clients). 0: no cap.
  size_t max_connections_per_address = 512;
  size_t admin_max_connections = 64;            // the admin listener's own budget
  TlsConfig tls;                                // the gateway listener's; off by default
  TlsConfig admin_tls;                          // the admin listener's; off by default
  Http2Config http2;                            // the gateway listener's (issue 34)
  TargetConfig request_target;                  // the gateway listener's
  size_t max_header_bytes = 16 * 1024;          // request line + headers; larger gets 431
  uint64_t max_body_bytes = 100 * 1024 * 1024;  // request bodies larger get 413
  int header_timeout_ms = 10'000;               // to read a request's headers (slow clients)
  int idle_timeout_ms = 60'000;                 // keep-alive connection with no request
  int drain_timeout_ms = 10'000;                // SIGTERM: time for in-flight requests
  // Header fields of one request, empty ones too (a folded line is part of its field); more get
  // 431.
  size_t max_header_fields = 100;
  // Request bodies up to this many bytes are read whole before an upstream connection is taken
  // (a trickling body holds none); larger ones are relayed from there on. 0: relay at once.
  size_t body_buffer_bytes = 64 * 1024;
  // A request body must have arrived, at each point, within body_timeout_ms of its head plus one
  // second per min_body_bytes_per_second bytes received; else 408 body_timeout, and closed.
  int body_timeout_ms = 10'000;
  uint64_t min_body_bytes_per_second = 1'024;
  // Each write to a client (our answer, or up to 16 KiB of a relayed response) must complete
  // within this; a client that stops reading is cut off.
  int send_timeout_ms = 10'000;
  // SIGTERM: keep serving this long before the drain (readyz answers 503 from the signal on), so
  // that load balancers and Kubernetes take the replica out before its listeners close.
  int shutdown_delay_ms = 0;
  // Built-in endpoints the gateway listener answers itself rather than forwarding: `health`
  // (/healthz, /readyz), `rate_limit` (GET /v1/rate-limit), `usage` (GET /v1/usage), `metrics`
  // (/metrics). The admin listener answers all of them. Default: health and rate_limit.
  struct PublicEndpoints {
    bool health = true;
    bool rate_limit = true;  // a client API (issue 31): off when the upstream owns the path
    bool usage = false;
    bool metrics = false;
  } public_endpoints;
  // Smoothing (`on_limit: delay`): requests held at once, per process and per identity (a key,
  // an account or a client address). A request that would be held beyond them is answered 429
  // instead (its limit rejects, consuming nothing).
  size_t max_held_requests = 10'000;
  size_t max_held_per_identity = 100;
  // Upgrade (RFC 9110 7.8; issue 33): the protocols an HTTP/1.1 request may switch to, tokens
  // compared in any case (default: websocket). `h2c` is refused at load. A request asking only
  // for others is served as plain HTTP/1.1 (its Upgrade ignored).
  std::vector<std::string> upgrades = {"websocket"};
  // An upgraded connection (a tunnel) in which no byte moved either way for this long is closed.
  int upgrade_idle_timeout_ms = 300'000;
  // Upgraded connections open at once per identity (the request's limit scope: a key, an
  // account or a client address; past it 429 too_many_upgrades) and per process (past it 503
  // upgrade_capacity). They do not count in upstream.max_connections.
  size_t max_upgraded_per_identity = 100;
  size_t max_upgraded_connections = 10'000;
  // The default of every route's `match`: false (`route_match: fold`): routes match the
  // folded path; true (`exact`): byte for byte.
  bool exact_route_match = false;
  bool access_log = true;  // one JSON line per request on stdout
  // GET /admin/top's sketches, updated per decided request (about 2 % of the gateway's CPU per
  // request, 5 % with many distinct keys: docs/benchmarks/history.md).
  bool top_offenders = true;
  // The admin API's bearer token (docs/configuration.md, "server"): every admin request but GET
  // and HEAD needs `Authorization: Bearer <token>`. A secret (`${ENV}`, `file:PATH`). Empty
  // (default): none asked, allowed only while admin_listen is a loopback address.
  std::string admin_token;
  // Host names the admin listener answers besides localhost, loopback and its own address
  // (DNS rebinding: any other Host gets 421). Default: none.
  std::vector<std::string> admin_hosts;
};

struct UpstreamConfig {
  std::string url = "http://127.0.0.1:8081";  // http[s]://host:port[/base-path]
  int connect_timeout_ms = 1'000;
  int timeout_ms = 30'000;       // until the upstream's response headers
  size_t max_connections = 256;  // pooled keep-alive connections, per process
  // Requests waiting for a connection when all max_connections are busy, per process; past
  // it, or after queue_timeout_ms of waiting, 503 upstream_busy.
  size_t queue_size = 1'024;
  int queue_timeout_ms = 1'000;
  // The proxy headers tollgate sets on a forwarded request (docs/http-contract.md, "Proxy
  // headers"); X-Forwarded-For is always set. From a peer that is not in
  // identity.trusted_proxies every proxy header is dropped first; a trusted proxy's are kept.
  struct ForwardedHeaders {
    bool x_forwarded_proto = true;
    bool x_forwarded_host = true;
    bool x_forwarded_port = false;
    bool x_real_ip = true;
    bool forwarded = false;  // RFC 7239: for=, host=, proto=
    bool operator==(const ForwardedHeaders&) const = default;
  } forwarded_headers;
  // The most of a thread's share of max_connections, and of queue_size, that one client (its
  // address, and its key when it has one) may hold at once; past it, 503 upstream_busy at once.
  // Addresses in identity.trusted_proxies are not counted. 100: no cap.
  int max_client_share_percent = 25;
  // An https:// upstream (`upstream.tls`, issue 33): its certificate verified by default.
  struct Tls {
    bool verify = true;       // false: any certificate (tests, private networks; logged)
    std::string ca_file;      // PEM; empty: the system's CAs
    std::string server_name;  // SNI and the name verified; empty: the url's host
    std::string cert_file;    // a client certificate (PEM) and its key, both or neither
    std::string key_file;
    bool operator==(const Tls&) const = default;
  } tls;
  // HTTP/2 to the upstream (issue 34; gRPC needs it): h2 by ALPN for https://, h2c with prior
  // knowledge for http://. One connection per thread carries every request as a stream.
  bool http2 = false;
  bool https() const { return url.rfind("https://", 0) == 0; }
  bool operator==(const UpstreamConfig&) const = default;
};

// Several upstreams (`upstreams:`, issue 33): a named group of endpoints, each with the
// group's settings (timeouts, max_connections per endpoint, tls, ...), chosen per request by
// `balance` among the endpoints that are admitted (docs/configuration.md, "upstreams").
enum class Balance : uint8_t { kRoundRobin, kLeastOutstanding };
inline constexpr util::NameTable<Balance, 2> kBalanceNames = {
    {{Balance::kRoundRobin, "round_robin"}, {Balance::kLeastOutstanding, "least_outstanding"}}};
static_assert(util::IsDense(kBalanceNames));

// Passive health: an endpoint that fails `consecutive_failures` requests in a row (a connect
// failure, a timeout, a broken answer or a 5xx) is ejected for base_ejection_ms, doubled at each
// ejection up to max_ejection_ms, and then admitted again. 0 failures: off (the `upstream:`
// section's group, so that one upstream is never ejected).
struct PassiveHealthConfig {
  int consecutive_failures = 5;
  int base_ejection_ms = 1'000;
  int max_ejection_ms = 30'000;
  bool operator==(const PassiveHealthConfig&) const = default;
};

// Active health: GET `path` on each endpoint every interval_ms (a new connection each time);
// unhealthy_threshold failed checks in a row (no answer within timeout_ms, or a status not in
// healthy_statuses) eject it until healthy_threshold checks in a row pass. Off while `path` is
// empty.
struct ActiveHealthConfig {
  std::string path;
  int interval_ms = 5'000;
  int timeout_ms = 1'000;
  int unhealthy_threshold = 1;
  int healthy_threshold = 1;
  std::vector<int> healthy_statuses;  // empty: 200 to 299
  bool enabled() const { return !path.empty(); }
  bool operator==(const ActiveHealthConfig&) const = default;
};

struct UpstreamGroupConfig {
  std::string name;
  // Each endpoint's url, with the group's other settings; at most 64, one base path for all.
  std::vector<UpstreamConfig> endpoints;
  Balance balance = Balance::kRoundRobin;
  PassiveHealthConfig passive;
  ActiveHealthConfig active;
  bool operator==(const UpstreamGroupConfig&) const = default;
};

// The name of the group a route without `upstream:` goes to: the `upstream:` section, or
// `upstreams.default`.
inline constexpr std::string_view kDefaultUpstream = "default";

// Where the limiter's state lives (`store.type`): this process's memory, or a Redis shared by
// the replicas. The names are the config file's, and the admin health answer's.
enum class StoreType : uint8_t { kMemory, kRedis };
inline constexpr util::NameTable<StoreType, 2> kStoreTypeNames = {
    {{StoreType::kMemory, "memory"}, {StoreType::kRedis, "redis"}}};
static_assert(util::IsDense(kStoreTypeNames));

struct StoreConfig {
  StoreType type = StoreType::kMemory;
  size_t max_keys = 1'000'000;      // memory: most keys held
  std::string prefix = "tollgate";  // key prefix: separates environments sharing a Redis
  // redis: redis://[user:pass@]host:port[/db], redis-cluster://host:port[,host:port...] or
  // redis-sentinel://[user:pass@]MASTER@host:port[,host:port...][/db];
  // rediss:// and rediss-cluster:// over TLS
  std::string url;
  int timeout_ms = 5;              // redis: deadline per decision
  int connect_timeout_ms = 1'000;  // redis: to connect and authenticate
  bool deny_cache = true;          // redis: reject locally what the last answer proves hopeless
  // redis: how many replicas share the store, for `fail_mode: local` (each enforces
  // 1/replicas of every limit while the store is down). 0: learned from the replicas'
  // heartbeats in the store (<prefix>:replicas) while it is up.
  int replicas = 0;
  // rediss: PEM files; the CA that signed the server's certificate (empty: the system's CAs),
  // and a client certificate with its key when the server asks for one.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
};

// A Redis Cluster store (redis-cluster://, rediss-cluster://): a script runs on one slot only.
inline bool IsRedisCluster(const StoreConfig& store) {
  return store.type == StoreType::kRedis && (store.url.rfind("redis-cluster://", 0) == 0 ||
                                             store.url.rfind("rediss-cluster://", 0) == 0);
}

// Where API keys come from: the configuration file (a `keys:` list or `keys_file`), or
// PostgreSQL (`keys: {source: postgres, ...}`; the config file accepts no other name). The names
// are the admin health answer's (`key_source.type`).
enum class KeySourceType : uint8_t { kFile, kPostgres };
inline constexpr util::NameTable<KeySourceType, 2> kKeySourceTypeNames = {
    {{KeySourceType::kFile, "file"}, {KeySourceType::kPostgres, "postgres"}}};
static_assert(util::IsDense(kKeySourceTypeNames));

struct KeySourceConfig {
  KeySourceType source = KeySourceType::kFile;
  std::string url;          // postgres://user:pass@host:port/db
  std::string snapshot;     // file of the last loaded keys, used when PostgreSQL is down
  int resync_seconds = 60;  // full reload on this period (and after every reconnect)
};

// The decision service for gateways people already run (nginx auth_request, Traefik
// ForwardAuth, Envoy ext_authz over HTTP). Off unless `listen` is set.
// The proxy in front of the decision service: which headers describe the original request.
// They are believed only from peers in identity.trusted_proxies.
enum class DecisionProxy {
  kNginx,    // X-Original-Method, X-Original-URI
  kTraefik,  // X-Forwarded-Method, X-Forwarded-Uri
  kEnvoy,    // none: ext_authz sends the original method and path as the check's own
};

struct DecisionConfig {
  std::string listen;     // host:port
  int deny_status = 429;  // nginx auth_request needs 403 (it turns anything else into 500)
  DecisionProxy proxy = DecisionProxy::kNginx;
  TargetConfig request_target;
};

// Envoy's rate limit service API v3 over gRPC. Off unless `listen` is set.
struct RlsDomainConfig {
  std::string domain;
  std::string key_entry;  // descriptor entry holding an API key
  std::string ip_entry;   // descriptor entry holding a client address
};
struct RlsConfig {
  std::string listen;
  std::vector<RlsDomainConfig> domains;
  // envoyproxy/ratelimit descriptor files (a file or a directory of *.yaml), relative to the
  // config file's directory; their domains are decided by descriptor (config/envoy_rls.hpp).
  std::string envoy_config;
  bool shadow_mode = false;  // every descriptor of those domains answers OK (upstream SHADOW_MODE)
  bool response_headers = false;  // RateLimit fields in response_headers_to_add for those domains
  double near_limit_ratio = 0.8;  // a hit above this share of its limit counts as near_limit
};

enum class Mode { kEnforce, kShadow };

// Whose budget a limit counts: one API key, one account, one client address, or every caller
// (`global`: protects an upstream with its own limit). kDefault: the plan's `scope` for a plan
// limit; for a route limit, `key` on keyed routes and `ip` on `identity: ip` routes.
enum class LimitScope { kDefault, kKey, kAccount, kIp, kGlobal };

// One limit of a plan (or of the anonymous per-IP limits, or of a route).
struct LimitConfig {
  std::string name;
  core::LimitSpec spec;
  LimitScope scope = LimitScope::kDefault;
  // Plan limits only, window algorithms (sliding_window_log, sliding_window_counter,
  // fixed_window) with window_seconds: 60. true: a key with the per-key columns
  // (KeyConfig::rate_limit_per_minute / rate_limit_burst) gets rate_limit_per_minute +
  // rate_limit_burst as this limit's `limit`; keys without them get `spec.limit`, which stays
  // required as the default. Default: false.
  bool from_key = false;
};

struct PlanConfig {
  std::string name;
  std::optional<Mode> mode;  // unset: the global mode
  // A stable share of the plan's keys enforced, the others in shadow mode: a key is in the
  // cohort when a hash of its id, mod 100, is below this, so raising it only adds keys. Unset:
  // `mode` decides for every key. Not together with `mode`.
  std::optional<int> enforce_percent;
  std::string scope = "key";  // key | account: whose budget the limits count
  std::vector<LimitConfig> limits;
};

// A per-key change to one named limit of its plan, until `expires`.
struct OverrideConfig {
  std::string limit;                      // the plan limit's name
  core::LimitSpec spec;                   // the plan's spec with the overridden fields
  std::optional<int64_t> expires_unix_s;  // unset: never expires
};

struct KeyConfig {
  std::string sha256_hex;  // digest of the key (a clear `key:` is hashed at load); empty: a
                           // key of client certificates only
  // The client certificates (mTLS) that stand for this key: by SHA-256 fingerprint of the DER
  // (64 lower-case hex digits), and by name (a URI or DNS subjectAltName, or the subject's CN).
  std::string cert_sha256;
  std::string cert_name;
  std::string id;  // shown in logs and metrics, never the key itself
  std::string account;
  std::string plan;
  std::optional<Mode> mode;  // this key's own enforcement; unset: its plan's (or cohort's)
  std::vector<OverrideConfig> overrides;
  // The per-key columns of Postgres `api_keys` (YAML keys may carry them too): both or neither.
  // They apply to the plan limits marked `from_key`: at most rate_limit_per_minute +
  // rate_limit_burst requests in any 60 s. REQUIRES: per_minute >= 1, burst >= 0 (see
  // KeyWindowLimit). Unset: the plan's own limit.
  std::optional<int64_t> rate_limit_per_minute;
  std::optional<int64_t> rate_limit_burst;
};

// Who a route's limits count: the API key's plan (a request without a valid key is refused 401),
// the client address (the anonymous limits), the key when one is presented and else the
// address (`key_or_ip`: a presented key that is unknown is still a 401), nobody, or the key
// the connection's verified client certificate names (`client_cert`: the API key header is not
// read; without such a certificate, 401). On `key` and `key_or_ip` routes a client certificate
// naming a key stands for it when no API key is presented.
enum class RouteIdentity { kKey, kIp, kKeyOrIp, kNone, kClientCert };
// What a route does while the store cannot decide: allow (counted as degraded), answer 503, or
// decide on this replica's own memory with each limit divided among the replicas.
enum class FailMode { kOpen, kClosed, kLocal };
std::string_view FailModeName(FailMode mode);

struct CostConfig {
  int64_t fixed = 1;  // used when `query` is empty
  std::string query;  // the query parameter holding a count (e.g. pages)
  int64_t per = 1;    // cost = max(min, ceil(count / per))
  int64_t min = 1;
};

// A route's path, by segments: literals, and `{name}` segments that match any one segment
// ("/v1/users/{id}/messages"); `prefix` ("/public/*", "/v1/export*"): the segments and anything
// below them.
struct PathPattern {
  struct Segment {
    std::string literal;  // empty for a `{name}` segment
    std::string param;    // the name of a `{name}` segment
  };
  std::vector<Segment> segments;
  bool prefix = false;
  bool templated = false;  // some segment is `{name}`
  bool folded = false;     // parsed from the folded path (util/path_fold.hpp)

  // Parses a route path; errors say what is wrong ("two wildcards in one segment").
  static core::Result<PathPattern> Parse(std::string_view path);
  // Parses `path` as Parse does, then folds it (util::FoldPath) and parses that: the pattern of
  // a route matched by the folded form (the default, `match: fold`).
  static core::Result<PathPattern> ParseFolded(std::string_view path);
  // Whether the canonical `path` (util/target.hpp; folded when `folded`) matches: exact patterns
  // with or without one trailing slash, prefixes by whole segments. `format_suffix`: the last
  // literal segment also matches with a format suffix ("/v1/export" matches "/v1/export.csv").
  bool Matches(std::string_view path, bool format_suffix = false) const;
  // Whether every path this pattern matches is also matched by `earlier`.
  bool CoveredBy(const PathPattern& earlier) const;
};

// A route's own limit, checked all-or-nothing with the caller's plan limits.
struct RouteLimitConfig {
  LimitConfig limit;  // its name, the spec every plan gets unless listed below, its scope
  // Per plan ("anonymous": callers without a key): that plan's spec, or nullopt: unlimited.
  std::map<std::string, std::optional<core::LimitSpec>> plans;
  // `mode` (issue 31): whose mode decides whether the limit rejects. kCaller: the caller's (its
  // key's, else its plan's); kEnforce: it rejects every caller whatever its plan's mode (only the
  // global `mode: shadow` shadows it); kShadow: it never rejects. Default: kEnforce for scopes
  // ip and global (they protect the upstream or slow an attacker), kCaller for key and account.
  enum class Mode { kCaller, kEnforce, kShadow };
  Mode mode = Mode::kCaller;
  // `exempt_enforced_keys`: a key whose own limits are enforced skips this limit (it is neither
  // checked nor counted); keys in shadow mode and callers without a key meet it. Moving a route
  // from per-address to per-key limits then never lowers its protection. Default: false.
  bool exempt_enforced_keys = false;
};

struct RouteConfig {
  std::string name;     // optional; unique; shown by check-config and in the route's limits
  std::string path;     // as written: exact, a prefix ending in '*', a template with {name}
  PathPattern pattern;  // `path`, parsed
  std::vector<std::string> methods;  // `method: GET` or `method: [GET, POST]`; empty: any
  CostConfig cost;
  FailMode fail_mode = FailMode::kOpen;
  RouteIdentity identity = RouteIdentity::kKey;
  std::vector<RouteLimitConfig> limits;  // at most 8; the route needs a `name`
  // `match: exact`: the path and method compared byte for byte (an upstream known to route
  // case-sensitively). Default (`match: fold`, or server.route_match): the folded path and the
  // method in any case (issue 31; docs/http-contract.md, "Routes").
  bool exact_match = false;
  // The route's own request-size limits, at most the server's (issue 33): a head larger (as it
  // is forwarded: the request line and `name: value` lines) gets 431, a body larger 413, before
  // any limit is counted. Unset: the server's.
  std::optional<size_t> max_header_bytes;
  std::optional<uint64_t> max_body_bytes;
  // `host:` (issue 33, virtual hosts): the route matches only requests for one of these hosts,
  // lower-case, without a port or a trailing dot; "*.example.com" for any name below it. Empty:
  // any host.
  std::vector<std::string> hosts;
  // `upstream:`: the group its requests go to (an index of Config::upstreams); 0: the default.
  std::string upstream = std::string(kDefaultUpstream);
  size_t upstream_index = 0;
};

struct IdentityConfig {
  std::vector<std::string> api_key_headers = {"Authorization", "X-API-Key"};
  std::vector<std::string> trusted_proxies;  // CIDRs whose X-Forwarded-For is believed
  // Invalid keys per client IP before 429 instead of 401.
  core::LimitSpec invalid_key_limit;
};

struct HeadersConfig {
  bool ietf = true;         // RateLimit-Policy / RateLimit (draft-ietf-httpapi-ratelimit-headers)
  bool ratelimit = true;    // RateLimit-Limit / -Remaining / -Reset
  bool x_ratelimit = true;  // X-RateLimit-Limit / -Remaining / -Reset
};

// Refused outright, before any limit, with 403 `blocked`: keys by id, accounts, and client
// addresses or networks (IPv4 or IPv6 CIDR). Reloadable; the admin API adds to it at run time.
struct DenyConfig {
  std::vector<std::string> keys;
  std::vector<std::string> accounts;
  std::vector<std::string> addresses;
};

struct Config {
  ServerConfig server;
  // The `upstream:` section (or the default group's first endpoint when `upstreams.default` is
  // given instead).
  UpstreamConfig upstream;
  // Every group, the default one first (its name kDefaultUpstream): `upstream:` as a group of
  // one endpoint without passive health, or `upstreams.default`; then the others by name.
  std::vector<UpstreamGroupConfig> upstreams;
  StoreConfig store;
  Mode mode = Mode::kEnforce;
  IdentityConfig identity;
  std::vector<PlanConfig> plans;  // in file order
  std::vector<KeyConfig> keys;
  KeySourceConfig key_source;
  std::vector<RouteConfig> routes;     // first match wins; unmatched paths: identity key, cost 1
  std::vector<LimitConfig> anonymous;  // per client IP, for `identity: ip` routes
  HeadersConfig headers;
  DecisionConfig decision;
  RlsConfig rls;
  DenyConfig deny;
};

// Routes that can never match: each is covered by an earlier route (first match wins), as
// "routes[3] (GET /v1/items) can never match: routes[1] (/v1/*) comes first". check-config
// prints them as warnings.
std::vector<std::string> UnreachableRoutes(const std::vector<RouteConfig>& routes);

// The keys whose `plan` names no plan of `config` (they get the strictest plan), in their order.
// The gateway logs and counts them at each load (tollgate_keys_unknown_plan).
std::vector<const KeyConfig*> KeysOfUnknownPlans(const Config& config);
// check-config's warnings about them: one per unknown plan name, with the first key's id and
// how many more.
std::vector<std::string> UnknownPlanWarnings(const Config& config);

// Parses YAML text. Errors name the field path ("plans.free.limits[0].capacity: must be > 0").
core::Result<Config> ParseConfig(const std::string& yaml_text, const std::string& base_dir = ".");
// A file: errors start with the field's line as well ("line 7: plans.free.mode: given twice
// (first at line 4): ..."). Only a regular file is read (a FIFO or a device is refused).
// `text`, when not null, receives the file as read (its hash is the gateway's config version).
core::Result<Config> LoadConfigFile(const std::string& path, std::string* text = nullptr);

// The window limit of a key's per-key columns, rate_limit_per_minute + rate_limit_burst, or an
// error naming the field ("rate_limit_per_minute: must be >= 1, got 0"). Every key source
// checks its keys with this one function.
core::Result<int64_t> KeyWindowLimit(int64_t rate_limit_per_minute, int64_t rate_limit_burst);

// A key's overrides as plain text: limit name -> field -> value, with the fields of YAML
// overrides (capacity, refill_per_second, refill_per_minute, refill_per_hour, limit,
// window_seconds, period, allowance, ceiling, expires). For key sources that do not read YAML
// (Postgres `api_keys.overrides`).
using OverrideFields = std::map<std::string, std::map<std::string, std::string>>;

// Checks `overrides` against the key's plan exactly as the YAML loader does (each override
// starts from the plan limit of that name). Errors name the field ("burst.capacity: must be
// >= 1, got -5").
core::Result<std::vector<OverrideConfig>> ParseOverrides(const OverrideFields& overrides,
                                                         const PlanConfig& plan);

// Whether `text` may travel in an HTTP field value tollgate writes (a key id, an account, a plan
// or limit name): no control characters (CR, LF, NUL, ...) and no DEL. Every key source checks
// with this.
bool IsFieldSafe(std::string_view text);

}  // namespace tollgate::config
