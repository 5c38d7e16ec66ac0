#include <tollgate/config/config.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <tollgate/util/digest.hpp>

namespace tollgate::config {
namespace {

const char* kOnePlan = "plans: {free: {limits: [{name: b, capacity: 5, refill_per_second: 1}]}}\n";
const char* kMinimal = R"(
plans:
  free:
    limits:
      - {name: burst, algorithm: token_bucket, capacity: 20, refill_per_second: 0.5}
      - {name: daily, algorithm: quota, period: day, allowance: 1000, ceiling: 10000}
keys:
  - {key: k1, id: one, plan: free}
)";

std::string ErrorOf(const std::string& yaml) {
  auto c = ParseConfig(yaml);
  return c ? "" : c.error();
}

TEST(Config, ParsesAndHashesKeys) {
  auto c = ParseConfig(kMinimal);
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_EQ(c->plans.size(), 1u);
  EXPECT_EQ(c->plans[0].limits[0].spec.capacity, 20);
  EXPECT_EQ(c->plans[0].limits[1].spec.ceiling, 10000);
  ASSERT_EQ(c->keys.size(), 1u);
  EXPECT_EQ(c->keys[0].sha256_hex, util::Sha256Hex("k1"));
  EXPECT_EQ(c->keys[0].account, "one");  // defaults to the key id
}

TEST(Config, ErrorsNameTheField) {
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: burst, capacity: 0, refill_per_second: 1}]}}"),
            "plans.free.limits[0].capacity: must be >= 1, got 0");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: burst, capacity: -5, refill_per_second: 1}]}}"),
            "plans.free.limits[0].capacity: must be >= 1, got -5");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: b, capacity: 5, refill_per_second: 0}]}}"),
            "plans.free.limits[0].refill_per_second: must be > 0, got '0'");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: b, algorithm: leaky, capacity: 5}]}}"),
            "plans.free.limits[0].algorithm: unknown 'leaky' (token_bucket, sliding_window_log, "
            "sliding_window_counter, fixed_window, quota)");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: b, capacity: 99999999999999999999, "
                    "refill_per_second: 1}]}}"),
            "plans.free.limits[0].capacity: out of range: 99999999999999999999");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: b, algorithm: fixed_window, limit: 5}]}}"),
            "plans.free.limits[0].window_seconds: required for fixed_window");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: b, capacity: 5, refill_per_second: 1, "
                    "window_seconds: 3}]}}"),
            "plans.free.limits[0].window_seconds: does not apply to algorithm token_bucket");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: b, capacity: 5, refil_per_second: 1}]}}"),
            "plans.free.limits[0].refil_per_second: unknown field");
  EXPECT_EQ(ErrorOf("mode: loud\nplans: {free: {limits: []}}"),
            "mode: must be enforce or shadow, got 'loud'");
  EXPECT_EQ(ErrorOf("plans: {}"),
            "plans: at least one plan is required (unless rls.envoy_config is all you serve)");
  EXPECT_NE(ErrorOf("plans: [unclosed"), "");
}

TEST(Config, NamesThatReachHeadersRefuseControlCharacters) {
  // Issue 18: a CR/LF in a key id injected "X-Evil: 1" into every upstream request of the key.
  const std::string plan =
      "plans: {free: {limits: [{name: b, capacity: 5, refill_per_second: 1}]}}\n";
  EXPECT_EQ(ErrorOf(plan + "keys: [{key: k, id: \"a\\r\\nX-Evil: 1\", plan: free}]"),
            "keys[0].id: must not contain control characters (CR, LF, NUL, ...)");
  EXPECT_EQ(ErrorOf(plan + "keys: [{key: k, id: a, account: \"x\\ny\", plan: free}]"),
            "keys[0].account: must not contain control characters (CR, LF, NUL, ...)");
  EXPECT_EQ(ErrorOf(plan + "keys: [{key: k, id: a, plan: \"free\\r\"}]"),
            "keys[0].plan: must not contain control characters (CR, LF, NUL, ...)");
  EXPECT_EQ(
      ErrorOf("plans: {\"free\\n\": {limits: [{name: b, capacity: 5, refill_per_second: 1}]}}"),
      "plans.free\n: a plan name must not be empty or contain control characters");
  EXPECT_EQ(
      ErrorOf("plans: {free: {limits: [{name: \"b\\r\", capacity: 5, refill_per_second: 1}]}}"),
      "plans.free.limits[0].name: must not contain control characters (CR, LF, NUL, ...)");
  EXPECT_EQ(ErrorOf(plan + "identity: {api_key_headers: [\"X-Key\\r\\nX-Evil\"]}"),
            "identity.api_key_headers[0]: must be a header name (letters, digits, -, ...)");
  EXPECT_EQ(ErrorOf(plan + "routes: [{path: /x, method: \"GET /\"}]"),
            "routes[0].method: must be a method name (GET, POST, ...)");
  EXPECT_TRUE(IsFieldSafe("k-1 caf\xc3\xa9"));
  EXPECT_FALSE(IsFieldSafe(std::string("a\0b", 3)));
  EXPECT_FALSE(IsFieldSafe("a\x7f"));
}

TEST(Config, ListenerAndPoolSettings) {
  const std::string plan =
      "plans: {free: {limits: [{name: b, capacity: 5, refill_per_second: 1}]}}\n";
  auto c = ParseConfig(plan + R"(
server: {max_connections_per_address: 3, admin_max_connections: 5,
         request_target: {allow_encoded_slash: true}}
upstream: {queue_size: 7, queue_timeout_ms: 250}
decision: {listen: "127.0.0.1:1", proxy: traefik, request_target: {allow_path_parameters: true}}
)");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->server.max_connections, 0u);  // derived from the file limit at start
  EXPECT_EQ(c->server.max_connections_per_address, 3u);
  EXPECT_EQ(c->server.admin_max_connections, 5u);
  EXPECT_TRUE(c->server.request_target.allow_encoded_slash);
  EXPECT_FALSE(c->server.request_target.allow_path_parameters);
  EXPECT_EQ(c->upstream.queue_size, 7u);
  EXPECT_EQ(c->upstream.queue_timeout_ms, 250);
  EXPECT_EQ(c->decision.proxy, DecisionProxy::kTraefik);
  EXPECT_TRUE(c->decision.request_target.allow_path_parameters);
  EXPECT_EQ(ErrorOf(plan + "decision: {proxy: haproxy}"),
            "decision.proxy: must be nginx, traefik or envoy, got 'haproxy'");
  EXPECT_EQ(ErrorOf(plan + "server: {request_target: {allow_dots: true}}"),
            "server.request_target.allow_dots: unknown field");
}

TEST(Config, StoreTls) {
  // Files that exist (their contents are the store's to check).
  const std::string pem = TOLLGATE_SOURCE_DIR "/README.md";
  auto c = ParseConfig(std::string(kMinimal) + R"(
store:
  type: redis
  url: rediss://user:pw@redis.internal:6380/0
  tls: {ca_file: )" + pem +
                       ", cert_file: " + pem + ", key_file: " + pem + "}\n");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->store.tls_ca_file, pem);
  EXPECT_EQ(c->store.tls_cert_file, pem);
  EXPECT_EQ(c->store.tls_key_file, pem);
  const std::string store = std::string(kMinimal) + "store:\n  type: redis\n";
  EXPECT_EQ(ErrorOf(store + "  url: redis://h:1\n  tls: {ca_file: " + pem + "}\n"),
            "store.tls: needs a rediss:// or rediss-cluster:// url");
  EXPECT_EQ(ErrorOf(store + "  url: rediss://h:1\n  tls: {cert_file: " + pem + "}\n"),
            "store.tls: cert_file and key_file go together");
  EXPECT_EQ(ErrorOf(store + "  url: rediss://h:1\n  tls: {ca_file: /no/such/ca.pem}\n"),
            "store.tls.ca_file: cannot read '/no/such/ca.pem': No such file or directory");
  EXPECT_EQ(ErrorOf(store + "  url: rediss://h:1\n  tls: {ca: /ca.pem}\n"),
            "store.tls.ca: unknown field");
}

// upstream.tls (issue 33): only with an https:// url; files read; the client pair together.
TEST(Config, UpstreamTls) {
  const std::string pem = TOLLGATE_SOURCE_DIR "/README.md";
  auto c = ParseConfig(std::string(kMinimal) + "upstream:\n  url: https://api.internal/v2\n" +
                       "  tls: {verify: false, server_name: api.example, ca_file: " + pem +
                       ", cert_file: " + pem + ", key_file: " + pem + "}\n");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_TRUE(c->upstream.https());
  EXPECT_FALSE(c->upstream.tls.verify);
  EXPECT_EQ(c->upstream.tls.server_name, "api.example");
  EXPECT_EQ(c->upstream.tls.ca_file, pem);
  EXPECT_EQ(c->upstream.tls.key_file, pem);
  auto plain = ParseConfig(std::string(kMinimal) + "upstream: {url: 'https://api.internal'}\n");
  ASSERT_TRUE(plain.ok()) << plain.error();
  EXPECT_TRUE(plain->upstream.tls.verify) << "verified unless said otherwise";
  const std::string up = std::string(kMinimal) + "upstream:\n";
  EXPECT_EQ(ErrorOf(up + "  url: http://h:1\n  tls: {verify: false}\n"),
            "upstream.tls: needs an https:// upstream.url");
  EXPECT_EQ(ErrorOf(up + "  tls: {verify: false}\n"),
            "upstream.tls: needs an https:// upstream.url");
  EXPECT_EQ(ErrorOf(up + "  url: https://h:1\n  tls: {key_file: " + pem + "}\n"),
            "upstream.tls: cert_file and key_file go together");
  EXPECT_EQ(ErrorOf(up + "  url: https://h:1\n  tls: {ca_file: /no/such/ca.pem}\n"),
            "upstream.tls.ca_file: cannot read '/no/such/ca.pem': No such file or directory");
  EXPECT_EQ(ErrorOf(up + "  url: https://h:1\n  tls: {verify: no}\n"),
            "upstream.tls.verify: must be true or false, got 'no'");
  EXPECT_EQ(ErrorOf(up + "  url: https://h:1\n  tls: {insecure: true}\n"),
            "upstream.tls.insecure: unknown field");
  EXPECT_EQ(ErrorOf(up + "  url: ftp://h:1\n"),
            "upstream.url: must start with http:// or https://");
  EXPECT_EQ(ErrorOf(up + "  url: https://h:70000\n"),
            "upstream.url: the port must be a number from 1 to 65535, got '70000'");
}

// Client certificates (issue 33): the listener's mode and CA, keys named by a certificate, and
// client_cert routes only where certificates are asked for.
TEST(Config, ClientCertificates) {
  const std::string fp(64, 'a');
  std::string colons;
  for (size_t i = 0; i < 64; i += 2) colons += (i ? ":" : "") + std::string("AA");
  const std::string tls =
      "server:\n  tls:\n    certificates: [{cert_file: /c.pem, key_file: /c.key}]\n"
      "    client_certificates: {mode: optional, ca_file: /ca.pem}\n";
  auto c =
      ParseConfig(std::string(kOnePlan) + tls + "keys:\n  - {cert_sha256: '" + colons +
                  "', id: a, plan: free}\n  - {cert_name: 'spiffe://x/b', id: b, plan: free}\n" +
                  "routes: [{path: /m/*, identity: client_cert}]\n");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->server.tls.client_auth, TlsConfig::ClientAuth::kOptional);
  EXPECT_EQ(c->server.tls.client_ca_file, "/ca.pem");
  EXPECT_EQ(c->keys[0].cert_sha256, fp) << "colons dropped, lower case";
  EXPECT_TRUE(c->keys[0].sha256_hex.empty());
  EXPECT_EQ(c->keys[1].cert_name, "spiffe://x/b");
  EXPECT_EQ(c->routes[0].identity, RouteIdentity::kClientCert);
  const std::string plan = kOnePlan;
  struct Row {
    std::string yaml, error;
  } rows[] = {
      {"keys: [{id: a, plan: free}]", "keys[0]: key, sha256, cert_sha256 or cert_name is required"},
      {"keys: [{cert_sha256: 'ab:cd', id: a, plan: free}]",
       "keys[0].cert_sha256: must be a SHA-256 fingerprint: 64 hex digits, colons allowed"},
      {"keys: [{cert_name: '', id: a, plan: free}]", "keys[0].cert_name: must not be empty"},
      {"keys: [{cert_sha256: '" + fp + "', id: a, plan: free}, {cert_sha256: '" + colons +
           "', id: b, plan: free}]",
       "keys[1].cert_sha256: another key names this certificate"},
      {"keys: [{cert_name: n, id: a, plan: free}, {cert_name: n, id: b, plan: free}]",
       "keys[1].cert_name: another key names 'n'"},
      {"routes: [{path: /m, identity: client_cert}]",
       "routes[0].identity: client_cert needs server.tls.client_certificates"},
      {"server: {tls: {certificates: [{cert_file: /c, key_file: /k}], client_certificates: "
       "{mode: required}}}",
       "server.tls.client_certificates.ca_file: required: the CAs client certificates must chain "
       "to"},
      {"server: {tls: {certificates: [{cert_file: /c, key_file: /k}], client_certificates: "
       "{mode: sometimes, ca_file: /ca}}}",
       "server.tls.client_certificates.mode: must be off, optional or required, got 'sometimes'"},
  };
  for (const Row& r : rows) EXPECT_EQ(ErrorOf(plan + r.yaml + "\n"), r.error) << r.yaml;
}

TEST(Config, OverridesStartFromThePlanLimit) {
  auto c = ParseConfig(std::string(kMinimal) + R"(
  - key: k2
    id: two
    plan: free
    overrides:
      burst: {capacity: 500, expires: "2026-12-31"}
)");
  ASSERT_TRUE(c.ok()) << c.error();
  const auto& o = c->keys[1].overrides.at(0);
  EXPECT_EQ(o.spec.capacity, 500);
  EXPECT_EQ(o.spec.refill, (core::Rate{1, 2'000'000}));  // kept from the plan
  EXPECT_EQ(o.expires_unix_s, core::DaysFromCivil({2026, 12, 31}) * 86'400);

  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "  - {key: k3, id: three, plan: free, overrides: "
                                            "{nope: {capacity: 1}}}\n"),
            "keys[1].overrides.nope: plan 'free' has no limit named 'nope'");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "  - {key: k3, id: three, plan: free, overrides: "
                                            "{burst: {capacity: 1, expires: soon}}}\n"),
            "keys[1].overrides.burst.expires: must be a UTC date (2026-12-31) or time "
            "(2026-12-31T23:00:00Z), got 'soon'");
}

TEST(Config, RejectsDuplicates) {
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "  - {key: k1, id: other, plan: free}\n"),
            "keys[1]: duplicate key");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "  - {key: k9, id: one, plan: free}\n"),
            "keys[1].id: duplicate 'one'");
}

TEST(Config, Routes) {
  auto c = ParseConfig(std::string(kMinimal) + R"(
routes:
  - {path: /v1/export, method: GET, cost: {query: pages, per: 50, min: 1}}
  - {path: /login, identity: ip, fail_mode: closed}
anonymous:
  limits: [{name: ip, capacity: 10, refill_per_second: 1}]
)");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->routes[0].cost.query, "pages");
  EXPECT_EQ(c->routes[0].cost.per, 50);
  EXPECT_EQ(c->routes[1].fail_mode, FailMode::kClosed);
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "routes: [{path: /x, fail_mode: maybe}]\n"),
            "routes[0].fail_mode: must be open, closed or local, got 'maybe'");
}

const char* kFromKeyPlans = R"(
plans:
  free:
    limits:
      - {name: burst, algorithm: token_bucket, capacity: 20, refill_per_second: 0.5}
      - {name: minute, algorithm: sliding_window_log, window_seconds: 60, limit: 60, from_key: true}
)";

TEST(Config, FromKeyMarksAPlanLimit) {
  auto c = ParseConfig(std::string(kFromKeyPlans) + "keys:\n  - {key: k1, id: one, plan: free}\n");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_FALSE(c->plans[0].limits[0].from_key);  // default
  EXPECT_TRUE(c->plans[0].limits[1].from_key);
  EXPECT_EQ(c->plans[0].limits[1].spec.limit, 60);  // the default for keys without the columns
  EXPECT_FALSE(c->keys[0].rate_limit_per_minute.has_value());

  const std::string plan = "plans: {free: {limits: [";
  EXPECT_EQ(ErrorOf(plan + "{name: m, capacity: 5, refill_per_second: 1, from_key: true}]}}"),
            "plans.free.limits[0].from_key: does not apply to algorithm token_bucket (the key's "
            "columns are a request count per minute)");
  EXPECT_EQ(ErrorOf(plan + "{name: m, algorithm: sliding_window_log, window_seconds: 30, limit: 5, "
                           "from_key: true}]}}"),
            "plans.free.limits[0].window_seconds: must be 60 with from_key (the key's columns are "
            "per minute)");
  EXPECT_EQ(ErrorOf(plan + "{name: m, algorithm: sliding_window_log, window_seconds: 60, "
                           "from_key: true}]}}"),
            "plans.free.limits[0].limit: required for sliding_window_log");
  EXPECT_EQ(ErrorOf(plan + "{name: m, algorithm: fixed_window, window_seconds: 60, limit: 5, "
                           "from_key: maybe}]}}"),
            "plans.free.limits[0].from_key: must be true or false, got 'maybe'");
  EXPECT_EQ(ErrorOf(std::string(kFromKeyPlans) + "anonymous:\n  limits: [{name: ip, algorithm: "
                                                 "fixed_window, window_seconds: 60, limit: 5, "
                                                 "from_key: true}]\n"),
            "anonymous.limits[0].from_key: only plan limits can take their limit from the key");
  EXPECT_EQ(ErrorOf(std::string(kFromKeyPlans) + "keys:\n  - {key: k1, id: one, plan: free, "
                                                 "overrides: {minute: {from_key: false}}}\n"),
            "keys[0].overrides.minute.from_key: unknown field");
  // from_key: false is allowed anywhere a plan limit is, and changes nothing.
  EXPECT_EQ(ErrorOf(plan + "{name: m, capacity: 5, refill_per_second: 1, from_key: false}]}}"), "");
}

TEST(Config, KeysMayCarryThePerKeyColumns) {
  auto c = ParseConfig(std::string(kFromKeyPlans) + R"(
keys:
  - {key: k1, id: one, plan: free, rate_limit_per_minute: 30, rate_limit_burst: 0}
)");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->keys[0].rate_limit_per_minute, 30);
  EXPECT_EQ(c->keys[0].rate_limit_burst, 0);

  const std::string key = std::string(kFromKeyPlans) + "keys:\n  - {key: k1, id: one, plan: free, ";
  EXPECT_EQ(ErrorOf(key + "rate_limit_per_minute: 30}\n"),
            "keys[0]: give both rate_limit_per_minute and rate_limit_burst, or neither");
  EXPECT_EQ(ErrorOf(key + "rate_limit_per_minute: -5, rate_limit_burst: 1}\n"),
            "keys[0].rate_limit_per_minute: must be >= 1, got -5");
  EXPECT_EQ(ErrorOf(key + "rate_limit_per_minute: 0, rate_limit_burst: 1}\n"),
            "keys[0].rate_limit_per_minute: must be >= 1, got 0");
  EXPECT_EQ(ErrorOf(key + "rate_limit_per_minute: 5, rate_limit_burst: -1}\n"),
            "keys[0].rate_limit_burst: must be >= 0, got -1");
  EXPECT_EQ(ErrorOf(key + "rate_limit_per_minute: lots, rate_limit_burst: 1}\n"),
            "keys[0].rate_limit_per_minute: must be an integer, got 'lots'");
}

TEST(Config, KeyWindowLimit) {
  EXPECT_EQ(*KeyWindowLimit(600, 100), 700);
  EXPECT_EQ(*KeyWindowLimit(1, 0), 1);
  EXPECT_EQ(KeyWindowLimit(0, 5).error(), "rate_limit_per_minute: must be >= 1, got 0");
  EXPECT_EQ(KeyWindowLimit(5, -1).error(), "rate_limit_burst: must be >= 0, got -1");
  EXPECT_EQ(
      KeyWindowLimit(int64_t{1} << 53, 1).error(),
      "rate_limit_burst: rate_limit_per_minute + rate_limit_burst must be <= 9007199254740992");
  EXPECT_FALSE(KeyWindowLimit(INT64_MAX, INT64_MAX).ok());
}

TEST(Config, ParseOverridesReadsFieldsLikeTheYamlLoader) {
  auto c = ParseConfig(kMinimal);
  ASSERT_TRUE(c.ok()) << c.error();
  const PlanConfig& free = c->plans[0];
  auto o = ParseOverrides({{"burst", {{"capacity", "500"}, {"expires", "2026-12-31"}}},
                           {"daily", {{"ceiling", "20000"}}}},
                          free);
  ASSERT_TRUE(o.ok()) << o.error();
  ASSERT_EQ(o->size(), 2u);
  EXPECT_EQ((*o)[0].limit, "burst");
  EXPECT_EQ((*o)[0].spec.capacity, 500);
  EXPECT_EQ((*o)[0].spec.refill, (core::Rate{1, 2'000'000}));  // kept from the plan
  EXPECT_EQ((*o)[0].expires_unix_s, core::DaysFromCivil({2026, 12, 31}) * 86'400);
  EXPECT_EQ((*o)[1].spec.ceiling, 20000);
  EXPECT_EQ((*o)[1].spec.allowance, 1000);
  EXPECT_FALSE((*o)[1].expires_unix_s.has_value());
  EXPECT_TRUE(ParseOverrides({}, free)->empty());

  EXPECT_EQ(ParseOverrides({{"burst", {{"capacity", "-5"}}}}, free).error(),
            "burst.capacity: must be >= 1, got -5");
  EXPECT_EQ(ParseOverrides({{"nope", {{"capacity", "5"}}}}, free).error(),
            "nope: plan 'free' has no limit named 'nope'");
  EXPECT_EQ(ParseOverrides({{"burst", {{"colour", "red"}}}}, free).error(),
            "burst.colour: unknown field");
  EXPECT_EQ(ParseOverrides({{"burst", {{"limit", "5"}}}}, free).error(),
            "burst.limit: does not apply to algorithm token_bucket");
  EXPECT_EQ(
      ParseOverrides({{"burst", {{"expires", "soon"}}}}, free).error(),
      "burst.expires: must be a UTC date (2026-12-31) or time (2026-12-31T23:00:00Z), got 'soon'");
}

}  // namespace
}  // namespace tollgate::config

namespace tollgate::config {
namespace {

// Regression: `keys: {source: postgres}` was refused with "must be a list of keys".
TEST(Config, PostgresKeySource) {
  auto c = ParseConfig(R"(
plans: {free: {limits: [{name: burst, capacity: 5, refill_per_second: 1}]}}
keys: {source: postgres, url: "postgres://app@127.0.0.1:5432/api", snapshot: /var/lib/tollgate/keys.json}
decision: {listen: "127.0.0.1:8082", deny_status: 403}
rls: {listen: "127.0.0.1:8083", domains: [{domain: api, key_entry: api_key}]}
)");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->key_source.source, KeySourceType::kPostgres);
  EXPECT_EQ(c->key_source.url, "postgres://app@127.0.0.1:5432/api");
  EXPECT_TRUE(c->keys.empty());
  EXPECT_EQ(c->decision.deny_status, 403);
  ASSERT_EQ(c->rls.domains.size(), 1u);
  EXPECT_EQ(c->rls.domains[0].key_entry, "api_key");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: b, capacity: 5, refill_per_second: 1}]}}\n"
                    "keys: {source: mysql, url: x}\n"),
            "keys.source: must be postgres (or give keys as a list)");
  EXPECT_EQ(ErrorOf("plans: {free: {limits: [{name: b, capacity: 5, refill_per_second: 1}]}}\n"
                    "rls: {listen: '127.0.0.1:8182', domains: [{domain: api}]}\n"),
            "rls.domains[0]: give key_entry or ip_entry");
}

}  // namespace
}  // namespace tollgate::config

namespace tollgate::config {
namespace {

TEST(Config, HeaderSets) {
  auto c = ParseConfig(std::string(kOnePlan));
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_TRUE(c->headers.ietf && c->headers.ratelimit && c->headers.x_ratelimit);  // default
  c = ParseConfig(std::string(kOnePlan) + "headers: [x-ratelimit]\n");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_FALSE(c->headers.ietf);
  EXPECT_FALSE(c->headers.ratelimit);
  EXPECT_TRUE(c->headers.x_ratelimit);
  EXPECT_EQ(ErrorOf(std::string(kOnePlan) + "headers: [ietf, draft]\n"),
            "headers[1]: must be ietf, ratelimit or x-ratelimit, got 'draft'");
}

TEST(Config, InvalidKeyLimit) {
  auto c = ParseConfig(std::string(kOnePlan));
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->identity.invalid_key_limit.capacity, 10);  // default: 10, refilled 0.2/s
  EXPECT_EQ(c->identity.invalid_key_limit.refill, core::Rate::Parse("0.2", 1).value());
  c = ParseConfig(std::string(kOnePlan) +
                  "identity: {invalid_key_limit: {algorithm: fixed_window, window_seconds: 60, "
                  "limit: 3}}\n");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->identity.invalid_key_limit.algorithm, core::Algorithm::kFixedWindow);
  EXPECT_EQ(c->identity.invalid_key_limit.limit, 3);
  EXPECT_EQ(ErrorOf(std::string(kOnePlan) + "identity: {invalid_key_limit: {name: x}}\n"),
            "identity.invalid_key_limit.name: unknown field");
}

// store.type and keys.source are read through their name tables (issue 32, part 5): the
// names of today's files, and the refusals of today's messages.
TEST(Config, StoreTypeAndKeySourceByName) {
  const std::string plan = kOnePlan;
  auto c = ParseConfig(plan);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->store.type, StoreType::kMemory);
  EXPECT_EQ(c->key_source.source, KeySourceType::kFile);
  c = ParseConfig(plan + "store: {type: redis, url: 'redis://127.0.0.1:6379'}\n");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->store.type, StoreType::kRedis);
  c = ParseConfig(plan + "store: {type: memory}\n");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->store.type, StoreType::kMemory);
  for (const std::string name : {"memcached", "Redis", "MEMORY", "file"}) {
    EXPECT_EQ(ErrorOf(plan + "store: {type: " + name + ", url: 'redis://127.0.0.1:6379'}\n"),
              "store.type: must be memory or redis, got '" + name + "'");
  }
  EXPECT_EQ(ErrorOf(plan + "store: {type: ''}\n"), "store.type: must be memory or redis, got ''");
  // `file` names the config's own list; a map can only name PostgreSQL.
  EXPECT_EQ(ErrorOf(plan + "keys: {source: file, url: x}\n"),
            "keys.source: must be postgres (or give keys as a list)");
}

TEST(Config, SectionChecks) {
  const std::string plan = kOnePlan;
  EXPECT_EQ(ErrorOf(plan + "upstream: {url: 'ftp://api'}\n"),
            "upstream.url: must start with http:// or https://");
  EXPECT_EQ(ErrorOf(plan + "store: {type: redis}\n"), "store.url: required for store.type redis");
  EXPECT_EQ(ErrorOf(plan + "routes: [{path: /x, identity: who}]\n"),
            "routes[0].identity: must be key, ip, key_or_ip, none or client_cert, got 'who'");
  EXPECT_EQ(ErrorOf(plan + "routes: [{path: /x, cost: {per: 5}}]\n"),
            "routes[0].cost.query: required");
  auto c = ParseConfig(plan +
                       "routes: [{path: /x, cost: 7}]\n"
                       "rls: {domains: [{domain: web, ip_entry: remote_address}]}\n");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->routes[0].cost.fixed, 7);
  EXPECT_EQ(c->rls.domains[0].ip_entry, "remote_address");
}

TEST(Config, KeySourcePathsAreRelativeToTheConfigFile) {
  auto c = ParseConfig(std::string(kOnePlan) +
                           "keys: {source: postgres, url: 'postgres://h/db', snapshot: keys.json, "
                           "resync_seconds: 5}\n",
                       "/etc/tollgate");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->key_source.snapshot, "/etc/tollgate/keys.json");
  EXPECT_EQ(c->key_source.resync_seconds, 5);
  EXPECT_EQ(
      ErrorOf(std::string(kOnePlan) + "keys: {source: postgres, url: x}\nkeys_file: k.yaml\n"),
      "keys_file: give keys_file or keys.source, not both");
  EXPECT_EQ(ErrorOf(std::string(kOnePlan) + "keys_file: /no/such/keys.yaml\n"),
            "keys_file: cannot read '/no/such/keys.yaml': No such file or directory");
}

// Regression: a readable keys_file was always refused with "keys_file: <file>: invalid node;
// first invalid key: "keys"": the loader rebound yaml-cpp's node for the missing root["keys"].
TEST(Config, KeysFileIsRead) {
  char tmpl[] = "/tmp/tollgate-keys-file-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  const std::string text = "- {key: k1, id: one, plan: free}\n";
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  auto c = ParseConfig(std::string(kOnePlan) + "keys_file: " + tmpl + "\n");
  ::unlink(tmpl);
  ASSERT_TRUE(c.ok()) << c.error();
  ASSERT_EQ(c->keys.size(), 1u);
  EXPECT_EQ(c->keys[0].id, "one");
}

}  // namespace
}  // namespace tollgate::config
