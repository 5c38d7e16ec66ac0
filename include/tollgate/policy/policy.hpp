// Who gets which limit: plans, keys, overrides, routes, costs, client addresses.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <tollgate/config/config.hpp>
#include <tollgate/core/limit.hpp>
#include <tollgate/core/result.hpp>
#include <tollgate/policy/route_table.hpp>
#include <tollgate/util/ascii.hpp>

namespace tollgate::policy {

struct NamedLimit {
  std::string name;
  core::Limit limit;
  // Whose budget it counts (never kDefault once compiled: a plan's default is resolved).
  config::LimitScope scope = config::LimitScope::kKey;
  // The check's name in the store and the headers: `name`, or "<plan>:<name>" for a plan limit
  // counted per address or globally (its budget is the plan's, not the address's other limits').
  std::string check_name;
};

struct Plan {
  std::string name;
  size_t index = 0;          // in Policy::plans(); plans().size() for the anonymous limits
  bool enforced = true;      // false: shadow (computed, counted, never rejects)
  bool per_account = false;  // limits count per account instead of per key
  // Set: the share of the plan's keys enforced (a cohort by a hash of the key id), the others
  // in shadow mode; `enforced` is then whether any key is (enforce_percent > 0).
  std::optional<int> enforce_percent;
  std::vector<NamedLimit> limits;
  bool mixed_scopes = false;  // some limit counts in another scope than the plan's
};

// Whether key `key_id` is in the enforced cohort of a plan enforcing `percent` % of its keys:
// a hash of the id, mod 100, below `percent`. Stable: raising the percentage only adds keys.
bool InEnforcedCohort(std::string_view key_id, int percent);

// A per-key replacement of one plan limit until `expires`.
struct Override {
  size_t limit_index;  // into the plan's limits
  core::Limit limit;
  std::optional<core::Instant> expires;  // unset: never
};

struct Key {
  // What every request of the key reads first, in its first two cache lines (a key of many is
  // not in the cache): plan, mode and overrides for the checks, id and account for the meter.
  const Plan* plan = nullptr;  // an unknown plan name resolves to the strictest plan
  // Whether this key's limits reject: its own `mode`, else its plan's cohort or mode.
  bool enforced = true;
  std::vector<Override> overrides;
  std::string id;
  std::string account;
  std::string plan_name;  // as configured

  // The limit that applies to plan limit `i` at `now` (an override until it expires).
  const core::Limit& LimitAt(size_t i, core::Instant now) const;
};

// The most requests per second `plan` admits in the long run: the lowest of its limits'
// (core::Limit::SustainedPerSecond); infinity for a plan without limits.
double SustainedPerSecond(const Plan& plan);
// The plan that keys naming an unknown plan get: the enforced plan with the lowest sustained
// rate (ties: the first in the file); shadow plans only when every plan is in shadow mode.
// REQUIRES: !plans.empty().
size_t Strictest(const std::vector<Plan>& plans);

// The credentials of an Authorization value of the Bearer scheme ("Bearer <key>", the scheme's
// name in any case), trimmed; nullopt for any other scheme.
inline std::optional<std::string_view> BearerToken(std::string_view value) {
  if (value.size() > 7 && util::EqualsIgnoreCase(value.substr(0, 7), "Bearer ")) {
    return util::Trim(value.substr(7));
  }
  return std::nullopt;
}

// An IPv4 or IPv6 network. IPv4 is held as IPv4-mapped IPv6.
struct Cidr {
  std::array<uint8_t, 16> bytes{};
  int prefix_len = 0;
  bool Contains(const std::array<uint8_t, 16>& addr) const;
};

// Parses "1.2.3.4", "::1", "::ffff:1.2.3.4" (and "[::1]") into IPv4-mapped IPv6 bytes.
std::optional<std::array<uint8_t, 16>> ParseAddress(std::string_view text);
// An X-Forwarded-For entry as load balancers write them: an address as ParseAddress takes it,
// or with a port ("1.2.3.4:5678", "[2001:db8::7]:443") or an IPv6 zone ("fe80::1%eth0"),
// optionally in double quotes and blanks. ForwardedAddressText: the address's own text, a view
// into `hop` ("" when the brackets or the port are malformed; not checked to be an address).
std::string_view ForwardedAddressText(std::string_view hop);
std::optional<std::array<uint8_t, 16>> ParseForwardedAddress(std::string_view hop);
core::Result<Cidr> ParseCidr(std::string_view text);

// Keys (by id), accounts, and client addresses or networks refused outright (403 `blocked`).
// Thread-compatible; immutable once built.
class DenyList {
 public:
  enum class Kind { kKey, kAccount, kAddress };
  struct Entry {
    Kind kind;
    std::string value;
  };
  // Errors name the entry: "deny.addresses[2]: not an IP address: 'x'".
  static core::Result<DenyList> Build(const config::DenyConfig& config);
  // Adds one entry (the admin API); an address that is no IP or CIDR is an error.
  std::optional<core::Error> Add(Kind kind, std::string_view value);
  // Whether a request of `key` (null: none) from `client` (as Policy::ClientAddress gives it: an
  // address, or an IPv6 /64 group, which a network matches when it holds the group) is refused.
  bool Denies(const Key* key, std::string_view client) const;
  bool empty() const { return entries_.empty(); }
  const std::vector<Entry>& entries() const { return entries_; }
  static std::optional<Kind> KindOf(std::string_view name);  // "key", "account", "address"
  static std::string_view NameOf(Kind kind);

 private:
  std::vector<Entry> entries_;
  std::vector<std::string> keys_, accounts_;  // sorted
  std::vector<Cidr> networks_;
};

// The compiled, immutable policy of one configuration. Thread-safe (immutable); a reload
// builds a new one and swaps it in.
class Policy {
 public:
  static core::Result<std::shared_ptr<const Policy>> Build(config::Config config);

  // By SHA-256 digest (32 raw bytes) of the presented key; null when unknown.
  const Key* FindByDigest(std::string_view digest32) const;
  // By the key as presented (hashed here: keys are only compared as digests).
  const Key* FindByKey(std::string_view presented) const;
  const Key* FindById(std::string_view id) const;
  // The key a verified client certificate stands for: by its SHA-256 fingerprint (lower-case
  // hex), else by the first of its `names` (URI and DNS subjectAltNames, then the CN) a key
  // names; null when none does.
  const Key* FindByCertificate(std::string_view sha256_hex,
                               std::span<const std::string> names) const;
  // Whether a route has size limits of its own (max_header_bytes, max_body_bytes).
  bool route_size_limits() const { return route_size_limits_; }
  // The route a request meets (RouteTable::Match).
  const Route& Match(std::string_view method, std::string_view path,
                     std::string_view host = {}) const {
    return routes_.Match(method, path, host);
  }
  bool HasHostRoutes() const { return routes_.has_hosts(); }
  // The request's cost from the route and the query string ("pages=120&x=1"). Errors are
  // client errors (400): a count that is not a non-negative integer.
  core::Result<int64_t> Cost(const Route& route, std::string_view query) const;
  // The client address for limits: the peer, or the right-most X-Forwarded-For entry that is
  // not a trusted proxy when the peer is one. IPv6 is grouped by /64 ("2001:db8:0:1::/64").
  // `peer` is the socket's address as text ("10.0.0.1", "::ffff:10.0.0.1", "2001:db8::1");
  // `forwarded_for` every X-Forwarded-For line of the request joined with ", ", in order. Entries
  // are read by ParseForwardedAddress (ports allowed); at one it cannot read, the walk stops at
  // the last address it could, and `*unparsed` (when given) is set.
  std::string ClientAddress(std::string_view peer, std::string_view forwarded_for,
                            bool* unparsed = nullptr) const;
  // Whether `peer` (an address as text) is in identity.trusted_proxies.
  bool IsTrusted(std::string_view peer) const;
  // The key presented in the configured headers (Authorization: Bearer …, X-API-Key); empty
  // when none. `header(name)` returns a header's value or empty.
  template <class HeaderFn>
  std::string_view PresentedKey(HeaderFn header) const {
    for (const std::string& name : config_.identity.api_key_headers) {
      std::string_view v = header(name);
      if (v.empty()) continue;
      if (name.size() == 13 && util::EqualsIgnoreCase(name, "Authorization")) {
        if (auto token = BearerToken(v)) return *token;
        continue;
      }
      return util::Trim(v);
    }
    return {};
  }

  const Plan& anonymous() const { return anonymous_; }
  const core::Limit& invalid_key_limit() const { return *invalid_key_limit_; }
  const std::vector<Plan>& plans() const { return plans_; }
  const Plan& strictest() const { return plans_[strictest_]; }
  const config::Config& config() const { return config_; }
  const DenyList& deny() const { return deny_; }

 private:
  Policy() = default;
  // The steps of Build(), in its order; each returns the error that ends the build, if any.
  void BuildPlans(const config::Config& config);  // plans, the strictest, anonymous, invalid key
  std::optional<core::Error> BuildKeys(const config::Config& config);
  std::optional<core::Error> BuildRoutes(const config::Config& config);
  std::optional<core::Error> CheckStoreCanSpanScopes(const config::StoreConfig& store) const;
  std::optional<core::Error> BuildRouteLimits(const config::RouteConfig& rc,
                                              const std::string& path, Route& r) const;
  std::optional<core::Error> BuildTrustedProxies(const config::Config& config);

  config::Config config_;
  std::vector<Plan> plans_;
  size_t strictest_ = 0;
  Plan anonymous_;
  std::optional<core::Limit> invalid_key_limit_;
  std::vector<Key> keys_;
  std::unordered_map<std::string, size_t> by_digest_;  // raw 32-byte digest
  std::unordered_map<std::string, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_cert_sha256_, by_cert_name_;
  bool route_size_limits_ = false;
  RouteTable routes_;
  std::vector<Cidr> trusted_;
  DenyList deny_;
};

}  // namespace tollgate::policy
