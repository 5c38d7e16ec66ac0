#include <tollgate/policy/policy.hpp>

#include <tollgate/util/digest.hpp>
#include <tollgate/util/hash.hpp>
#include <tollgate/util/query.hpp>

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>

namespace tollgate::policy {
namespace {

core::Limit MustCreate(const core::LimitSpec& spec) {
  // Specs were validated by the config loader.
  return core::Limit::Create(spec).value();
}

std::string HexToRaw(const std::string& hex) {
  std::string raw(hex.size() / 2, '\0');
  for (size_t i = 0; i < raw.size(); ++i) {
    raw[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return raw;
}

// `owner`'s limits; `scope` is their default (a plan's `scope`, ip for the anonymous limits).
std::vector<NamedLimit> Compile(const std::vector<config::LimitConfig>& limits,
                                std::string_view owner, config::LimitScope scope) {
  std::vector<NamedLimit> out;
  for (const auto& l : limits) {
    const config::LimitScope s = l.scope == config::LimitScope::kDefault ? scope : l.scope;
    const bool qualified =
        s != scope && (s == config::LimitScope::kIp || s == config::LimitScope::kGlobal);
    out.push_back(
        {l.name, MustCreate(l.spec), s, qualified ? std::string(owner) + ":" + l.name : l.name});
  }
  return out;
}

}  // namespace

const core::Limit& Key::LimitAt(size_t i, core::Instant now) const {
  for (const Override& o : overrides) {
    if (o.limit_index == i && (!o.expires || now < *o.expires)) return o.limit;
  }
  return plan->limits[i].limit;
}

bool Cidr::Contains(const std::array<uint8_t, 16>& addr) const {
  int bits = prefix_len;
  for (size_t i = 0; i < 16 && bits > 0; ++i, bits -= 8) {
    const uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((addr[i] & mask) != (bytes[i] & mask)) return false;
  }
  return true;
}

std::optional<std::array<uint8_t, 16>> ParseAddress(std::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']')
    text = text.substr(1, text.size() - 2);
  if (text.empty() || text.size() > 45) return std::nullopt;
  char buf[64];
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  std::array<uint8_t, 16> out{};
  in_addr v4;
  if (inet_pton(AF_INET, buf, &v4) == 1) {
    out[10] = out[11] = 0xff;
    std::memcpy(&out[12], &v4, 4);
    return out;
  }
  if (inet_pton(AF_INET6, buf, out.data()) == 1) return out;
  return std::nullopt;
}

namespace {
// An IPv6 address without its zone ("fe80::1%eth0", "fe80::1%25eth0"): the zone names an
// interface of the proxy, not another client.
std::string_view WithoutZone(std::string_view address) {
  const size_t percent = address.find('%');
  return percent != std::string_view::npos && address.find(':') < percent
             ? address.substr(0, percent)
             : address;
}
}  // namespace

std::string_view ForwardedAddressText(std::string_view hop) {
  hop = util::Trim(hop);
  if (hop.size() >= 2 && hop.front() == '"' && hop.back() == '"') {
    hop = hop.substr(1, hop.size() - 2);
  }
  auto is_port = [](std::string_view p) {
    if (p.empty() || p.size() > 5) return false;
    int port = 0;
    for (const char c : p) {
      if (c < '0' || c > '9') return false;
      port = port * 10 + (c - '0');
    }
    return port <= 65535;
  };
  if (!hop.empty() && hop.front() == '[') {
    const size_t close = hop.find(']');
    if (close == std::string_view::npos) return {};
    const std::string_view rest = hop.substr(close + 1);
    if (!rest.empty() && !(rest.front() == ':' && is_port(rest.substr(1)))) return {};
    return WithoutZone(hop.substr(1, close - 1));
  }
  // One ':' is an IPv4 address with a port ("1.2.3.4:5678"); more are an IPv6 address.
  const size_t colon = hop.find(':');
  if (colon != std::string_view::npos && hop.find(':', colon + 1) == std::string_view::npos) {
    if (!is_port(hop.substr(colon + 1))) return {};
    hop = hop.substr(0, colon);
    if (hop.find('.') == std::string_view::npos) return {};
  }
  return WithoutZone(hop);
}

std::optional<std::array<uint8_t, 16>> ParseForwardedAddress(std::string_view hop) {
  const std::string_view text = ForwardedAddressText(hop);
  if (text.empty()) return std::nullopt;
  return ParseAddress(text);
}

core::Result<Cidr> ParseCidr(std::string_view text) {
  const size_t slash = text.find('/');
  auto addr = ParseAddress(text.substr(0, slash));
  if (!addr) return core::Error{"not an IP address: '" + std::string(text) + "'"};
  const bool v4 = (*addr)[10] == 0xff && (*addr)[11] == 0xff &&
                  std::all_of(addr->begin(), addr->begin() + 10, [](uint8_t b) { return b == 0; });
  int len = v4 ? 32 : 128;
  if (slash != std::string_view::npos) {
    const std::string_view n = text.substr(slash + 1);
    const auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), len);
    if (ec != std::errc() || p != n.data() + n.size() || len < 0 || len > (v4 ? 32 : 128)) {
      return core::Error{"bad prefix length in '" + std::string(text) + "'"};
    }
  }
  return Cidr{*addr, v4 ? len + 96 : len};
}

core::Result<std::shared_ptr<const Policy>> Policy::Build(config::Config config) {
  std::shared_ptr<Policy> p(new Policy());
  p->BuildPlans(config);
  if (auto error = p->BuildKeys(config)) return *std::move(error);
  if (auto error = p->BuildRoutes(config)) return *std::move(error);
  if (auto error = p->CheckStoreCanSpanScopes(config.store)) return *std::move(error);
  if (auto error = p->BuildTrustedProxies(config)) return *std::move(error);
  auto deny = DenyList::Build(config.deny);
  if (!deny) return core::Error{deny.error()};
  p->deny_ = std::move(deny).value();
  p->config_ = std::move(config);
  return std::shared_ptr<const Policy>(std::move(p));
}

double SustainedPerSecond(const Plan& plan) {
  double rate = std::numeric_limits<double>::infinity();  // no limits: unlimited
  for (const NamedLimit& l : plan.limits) rate = std::min(rate, l.limit.SustainedPerSecond());
  return rate;
}

bool InEnforcedCohort(std::string_view key_id, int percent) {
  // A fixed hash with no per-process seed (issue 31): the cohort must be the same on every
  // replica and after every restart, so util::Hash64 (seeded per process) cannot be used.
  constexpr uint64_t kCohortSeed = 0x636f686f72740001;
  return static_cast<int>(util::StableHash64(key_id, kCohortSeed) % 100) < percent;
}

size_t Strictest(const std::vector<Plan>& plans) {
  // Enforced plans only, unless every plan is in shadow mode (then nothing is enforced anyway).
  const bool any_enforced =
      std::any_of(plans.begin(), plans.end(), [](const Plan& p) { return p.enforced; });
  std::optional<size_t> best;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (any_enforced && !plans[i].enforced) continue;
    if (!best || SustainedPerSecond(plans[i]) < SustainedPerSecond(plans[*best])) best = i;
  }
  return best.value_or(0);
}

void Policy::BuildPlans(const config::Config& config) {
  for (const auto& pc : config.plans) {
    Plan plan;
    plan.name = pc.name;
    plan.enforce_percent = pc.enforce_percent;
    plan.enforced = pc.enforce_percent ? *pc.enforce_percent > 0
                                       : pc.mode.value_or(config.mode) == config::Mode::kEnforce;
    plan.per_account = pc.scope == "account";
    const config::LimitScope scope =
        plan.per_account ? config::LimitScope::kAccount : config::LimitScope::kKey;
    plan.limits = Compile(pc.limits, pc.name, scope);
    plan.mixed_scopes = std::any_of(plan.limits.begin(), plan.limits.end(),
                                    [scope](const NamedLimit& l) { return l.scope != scope; });
    plan.index = plans_.size();
    plans_.push_back(std::move(plan));
  }
  strictest_ = Strictest(plans_);
  anonymous_.name = "anonymous";
  anonymous_.enforced = config.mode == config::Mode::kEnforce;
  anonymous_.limits = Compile(config.anonymous, "anonymous", config::LimitScope::kIp);
  anonymous_.index = plans_.size();
  invalid_key_limit_ = MustCreate(config.identity.invalid_key_limit);
}

std::optional<core::Error> Policy::BuildKeys(const config::Config& config) {
  for (const auto& kc : config.keys) {
    Key k;
    k.id = kc.id;
    k.account = kc.account;
    k.plan_name = kc.plan;
    k.plan = &plans_[strictest_];
    const config::PlanConfig* plan_config = nullptr;
    for (size_t i = 0; i < plans_.size(); ++i) {
      if (plans_[i].name != kc.plan) continue;
      k.plan = &plans_[i];
      plan_config = &config.plans[i];
    }
    if (kc.mode) {
      k.enforced = *kc.mode == config::Mode::kEnforce;
    } else if (!plan_config) {
      // A key of an unknown plan is enforced unless everything is in shadow mode (issue 31):
      // the strictest plan may itself be rolling out (enforce_percent: 1), and its shadow share
      // must not make a misnamed plan unlimited.
      k.enforced = config.mode == config::Mode::kEnforce;
    } else if (k.plan->enforce_percent) {
      // A plan counted per account draws its cohort by account: keys of one account share one
      // budget, and a shadow key must not drain what its enforced siblings are held to.
      k.enforced =
          InEnforcedCohort(k.plan->per_account ? k.account : k.id, *k.plan->enforce_percent);
    } else {
      k.enforced = k.plan->enforced;
    }
    for (const auto& oc : kc.overrides) {
      for (size_t i = 0; i < k.plan->limits.size(); ++i) {
        if (k.plan->limits[i].name != oc.limit) continue;
        std::optional<core::Instant> expires;
        if (oc.expires_unix_s) expires = core::Instant::FromUnixSeconds(*oc.expires_unix_s);
        k.overrides.push_back({i, MustCreate(oc.spec), expires});
      }
    }
    // The per-key columns set the plan's from_key limits (issue 5). They come after the
    // configured overrides, so a dated override wins while it lasts. A key whose plan is
    // unknown gets the strictest plan as it is.
    if (plan_config && kc.rate_limit_per_minute && kc.rate_limit_burst) {
      auto window_limit = config::KeyWindowLimit(*kc.rate_limit_per_minute, *kc.rate_limit_burst);
      if (!window_limit) return core::Error{"keys." + kc.id + "." + window_limit.error()};
      for (size_t i = 0; i < plan_config->limits.size(); ++i) {
        if (!plan_config->limits[i].from_key) continue;
        core::LimitSpec spec = plan_config->limits[i].spec;
        spec.limit = *window_limit;
        auto limit = core::Limit::Create(spec);
        if (!limit) return core::Error{"keys." + kc.id + ": " + limit.error()};
        k.overrides.push_back({i, std::move(limit).value(), std::nullopt});
      }
    }
    if (!kc.sha256_hex.empty()) by_digest_[HexToRaw(kc.sha256_hex)] = keys_.size();
    if (!kc.cert_sha256.empty()) by_cert_sha256_[kc.cert_sha256] = keys_.size();
    if (!kc.cert_name.empty()) by_cert_name_[kc.cert_name] = keys_.size();
    by_id_[k.id] = keys_.size();
    keys_.push_back(std::move(k));
  }
  return std::nullopt;
}

std::optional<core::Error> Policy::BuildRouteLimits(const config::RouteConfig& rc,
                                                    const std::string& path, Route& r) const {
  for (const Plan& p : plans_) {
    if (!rc.limits.empty() && p.name == rc.name) {
      return core::Error{path + ".name: '" + rc.name + "' is also a plan's name"};
    }
  }
  for (size_t j = 0; j < rc.limits.size(); ++j) {
    const config::RouteLimitConfig& rl = rc.limits[j];
    const std::string lpath = path + ".limits[" + std::to_string(j) + "]";
    RouteLimit limit{
        rc.name + ":" + rl.limit.name, rl.limit.scope, {}, rl.mode, rl.exempt_enforced_keys};
    for (const auto& [plan, value] : rl.plans) {
      const bool known =
          plan == "anonymous" ||
          std::any_of(plans_.begin(), plans_.end(), [&](const Plan& p) { return p.name == plan; });
      if (!known) return core::Error{lpath + ".plans." + plan + ": no such plan"};
    }
    auto value_for = [&](const std::string& plan) -> std::optional<core::Limit> {
      auto it = rl.plans.find(plan);
      if (it == rl.plans.end()) return MustCreate(rl.limit.spec);
      if (!it->second) return std::nullopt;  // unlimited
      return MustCreate(*it->second);
    };
    for (const Plan& p : plans_) limit.per_plan.push_back(value_for(p.name));
    limit.per_plan.push_back(value_for("anonymous"));
    r.limits.push_back(std::move(limit));
  }
  return std::nullopt;
}

std::optional<core::Error> Policy::CheckStoreCanSpanScopes(const config::StoreConfig& store) const {
  if (!config::IsRedisCluster(store)) return std::nullopt;
  // Redis Cluster runs a script on the keys of one slot only: a request's checks share the
  // caller's hash tag, so every limit must count in the caller's own scope.
  for (const Plan& p : plans_) {
    if (p.mixed_scopes) {
      return core::Error{"plans." + p.name +
                         ": a limit with another scope than the plan's needs one Redis, not "
                         "Redis Cluster (a request's keys must share one slot)"};
    }
  }
  for (size_t i = 0; i < routes_.routes().size(); ++i) {
    if (!routes_.routes()[i].limits.empty()) {
      return core::Error{"routes[" + std::to_string(i) +
                         "].limits: route limits need one Redis, not Redis Cluster (a request's "
                         "keys must share one slot)"};
    }
  }
  return std::nullopt;
}

namespace {

std::string RouteLabel(const config::RouteConfig& rc) {
  if (!rc.name.empty()) return rc.name;
  std::string label;
  for (const std::string& m : rc.methods) label.append(label.empty() ? "" : ",").append(m);
  return (label.empty() ? label : label.append(" ")).append(rc.path);
}

}  // namespace

std::optional<core::Error> Policy::BuildRoutes(const config::Config& config) {
  for (size_t i = 0; i < config.routes.size(); ++i) {
    const auto& rc = config.routes[i];
    Route r;
    r.name = rc.name;
    r.label = RouteLabel(rc);
    r.pattern = rc.pattern;
    r.fold = !rc.exact_match;
    r.exact_pattern = r.fold ? config::PathPattern::Parse(rc.path).value() : rc.pattern;
    // Matched by whole segments (see RouteTable::Match): "/public/*" and "/v1/export*" are both
    // the segment prefix "/public" or "/v1/export"; an exact "/login/" is "/login".
    for (const auto& s : r.pattern.segments) r.literal.append("/").append(s.literal);
    for (const auto& s : r.exact_pattern.segments) r.exact_literal.append("/").append(s.literal);
    r.methods = rc.methods;
    r.cost = rc.cost;
    r.fail_mode = rc.fail_mode;
    r.identity = rc.identity;
    r.max_header_bytes = rc.max_header_bytes;
    r.max_body_bytes = rc.max_body_bytes;
    route_size_limits_ = route_size_limits_ || rc.max_header_bytes || rc.max_body_bytes;
    r.hosts = rc.hosts;
    r.upstream = rc.upstream_index;
    const bool by_address =
        r.identity == config::RouteIdentity::kIp || r.identity == config::RouteIdentity::kKeyOrIp;
    if (by_address && anonymous_.limits.empty() && rc.limits.empty()) {
      return core::Error{"routes[" + std::to_string(i) + "].identity: " +
                         (r.identity == config::RouteIdentity::kIp ? "ip" : "key_or_ip") +
                         " needs anonymous.limits or limits of its own"};
    }
    if (auto error = BuildRouteLimits(rc, "routes[" + std::to_string(i) + "]", r)) return error;
    routes_.Add(std::move(r));
  }
  return std::nullopt;
}

std::optional<DenyList::Kind> DenyList::KindOf(std::string_view name) {
  if (name == "key") return Kind::kKey;
  if (name == "account") return Kind::kAccount;
  if (name == "address") return Kind::kAddress;
  return std::nullopt;
}

std::string_view DenyList::NameOf(Kind kind) {
  return kind == Kind::kKey ? "key" : kind == Kind::kAccount ? "account" : "address";
}

std::optional<core::Error> DenyList::Add(Kind kind, std::string_view value) {
  if (value.empty()) return core::Error{"an empty " + std::string(NameOf(kind))};
  if (kind == Kind::kAddress) {
    auto cidr = ParseCidr(value);
    if (!cidr) return core::Error{cidr.error()};
    networks_.push_back(*cidr);
  } else {
    auto& list = kind == Kind::kKey ? keys_ : accounts_;
    list.insert(std::upper_bound(list.begin(), list.end(), value), std::string(value));
  }
  entries_.push_back({kind, std::string(value)});
  return std::nullopt;
}

core::Result<DenyList> DenyList::Build(const config::DenyConfig& config) {
  DenyList d;
  const std::pair<Kind, const std::vector<std::string>*> lists[] = {
      {Kind::kKey, &config.keys},
      {Kind::kAccount, &config.accounts},
      {Kind::kAddress, &config.addresses}};
  for (const auto& [kind, values] : lists) {
    for (size_t i = 0; i < values->size(); ++i) {
      if (auto error = d.Add(kind, (*values)[i])) {
        return core::Error{"deny." + std::string(NameOf(kind)) +
                           (kind == Kind::kAddress ? "es[" : "s[") + std::to_string(i) +
                           "]: " + error->message};
      }
    }
  }
  return d;
}

bool DenyList::Denies(const Key* key, std::string_view client) const {
  if (entries_.empty()) return false;
  if (key && (std::binary_search(keys_.begin(), keys_.end(), key->id) ||
              std::binary_search(accounts_.begin(), accounts_.end(), key->account)))
    return true;
  if (networks_.empty() || client.empty()) return false;
  auto address = ParseAddress(client.substr(0, client.find('/')));
  if (!address) return false;
  return std::any_of(networks_.begin(), networks_.end(),
                     [&](const Cidr& n) { return n.Contains(*address); });
}

std::optional<core::Error> Policy::BuildTrustedProxies(const config::Config& config) {
  for (size_t i = 0; i < config.identity.trusted_proxies.size(); ++i) {
    auto cidr = ParseCidr(config.identity.trusted_proxies[i]);
    if (!cidr)
      return core::Error{"identity.trusted_proxies[" + std::to_string(i) + "]: " + cidr.error()};
    trusted_.push_back(*cidr);
  }
  return std::nullopt;
}

const Key* Policy::FindByDigest(std::string_view digest32) const {
  auto it = by_digest_.find(std::string(digest32));
  return it == by_digest_.end() ? nullptr : &keys_[it->second];
}

const Key* Policy::FindByKey(std::string_view presented) const {
  return FindByDigest(util::Sha256Raw(presented));
}

const Key* Policy::FindById(std::string_view id) const {
  auto it = by_id_.find(std::string(id));
  return it == by_id_.end() ? nullptr : &keys_[it->second];
}

const Key* Policy::FindByCertificate(std::string_view sha256_hex,
                                     std::span<const std::string> names) const {
  if (auto it = by_cert_sha256_.find(std::string(sha256_hex)); it != by_cert_sha256_.end())
    return &keys_[it->second];
  for (const std::string& name : names) {
    if (auto it = by_cert_name_.find(name); it != by_cert_name_.end()) return &keys_[it->second];
  }
  return nullptr;
}

namespace {
// Whether a query parameter named `name` (decoded) is read as the cost parameter `param` by a
// common parser (issue 31). Compared in any case (ASP.NET's query collection), cut at a NUL
// (PHP's C strings), after leading spaces (PHP), as each parser takes the name's base:
//   - qs (Express): before the first '[' ("pages[]", "pages[0]", "pages[a][b]");
//   - Rack 2: after leading '[' and ']', up to the next ("[pages]", "pages]");
//   - PHP: before a '[' that a ']' closes, with ' ' and '.' read as '_', and an unclosed '['
//     read as '_' too ("page.count", "page count", "page[count" are all "page_count").
bool IsCostParam(std::string_view name, std::string_view param) {
  name = name.substr(0, name.find('\0'));
  while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
  auto is = [param](std::string_view base) { return util::EqualsIgnoreCase(base, param); };
  if (is(name.substr(0, name.find('[')))) return true;
  const size_t rack_begin = name.find_first_not_of("[]");
  if (rack_begin != std::string_view::npos) {
    const std::string_view rest = name.substr(rack_begin);
    if (is(rest.substr(0, rest.find_first_of("[]")))) return true;
  }
  if (name.size() != param.size() && name.find('[') == std::string_view::npos) return false;
  std::string php;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c == '[' && name.find(']', i) != std::string_view::npos) break;
    php.push_back(c == ' ' || c == '.' || c == '[' ? '_' : c);
    if (c == '[') {  // unclosed: PHP keeps the rest as it is
      php.append(name.substr(i + 1));
      break;
    }
  }
  return is(php);
}

}  // namespace

core::Result<int64_t> Policy::Cost(const Route& route, std::string_view query) const {
  const config::CostConfig& c = route.cost;
  if (c.query.empty()) return c.fixed;
  // Read as the upstream's framework reads it (names and values decoded); a parameter given
  // more than once counts its largest value, whichever of them the upstream takes (issue 18),
  // and so does every other spelling a common parser reads as it (IsCostParam; issue 31).
  std::optional<int64_t> count;
  bool valid = true;
  auto each = [&](std::string_view name, std::string_view value, bool) {
    if (!IsCostParam(name, c.query)) return true;
    int64_t n = 0;
    const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || p != value.data() + value.size() || n < 0) {
      valid = false;
      return false;
    }
    count = std::max(count.value_or(0), n);
    return true;
  };
  util::ForEachQueryParam(query, each, "&;");
  if (!valid)
    return core::Error{"query parameter '" + c.query + "' must be a non-negative integer"};
  if (!count) return c.min;
  const int64_t cost = *count / c.per + (*count % c.per != 0);
  return std::max(c.min, cost);
}

bool Policy::IsTrusted(std::string_view peer) const {
  if (trusted_.empty()) return false;
  const auto addr = ParseAddress(peer);
  return addr && std::any_of(trusted_.begin(), trusted_.end(),
                             [&](const Cidr& c) { return c.Contains(*addr); });
}

std::string Policy::ClientAddress(std::string_view peer, std::string_view forwarded_for,
                                  bool* unparsed) const {
  auto addr = ParseAddress(peer);
  auto trusted = [&](const std::array<uint8_t, 16>& a) {
    for (const Cidr& c : trusted_)
      if (c.Contains(a)) return true;
    return false;
  };
  if (addr && !forwarded_for.empty() && trusted(*addr)) {
    // Walk right to left; the first hop that is not a trusted proxy is the client.
    std::string_view rest = forwarded_for;
    while (!rest.empty()) {
      const size_t comma = rest.rfind(',');
      const std::string_view hop =
          util::Trim(comma == std::string_view::npos ? rest : rest.substr(comma + 1));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(0, comma);
      auto a = ParseForwardedAddress(hop);
      if (!a) {
        // Garbage ("unknown", an obfuscated name): keep the last address we could trust, and
        // say so, for the caller to count (issue 31).
        if (unparsed) *unparsed = true;
        break;
      }
      addr = a;
      if (!trusted(*a)) break;
    }
  }
  if (!addr) return std::string(peer);
  const auto& b = *addr;
  const bool v4 = b[10] == 0xff && b[11] == 0xff &&
                  std::all_of(b.begin(), b.begin() + 10, [](uint8_t x) { return x == 0; });
  char buf[INET6_ADDRSTRLEN];
  if (v4) {
    // Formatted here: glibc's inet_ntop goes through sprintf, which showed in profiles.
    char* p = buf;
    for (int i = 12; i < 16; ++i) {
      if (i > 12) *p++ = '.';
      p = std::to_chars(p, buf + sizeof buf, b[i]).ptr;
    }
    return std::string(buf, p);
  }
  std::array<uint8_t, 16> net{};
  std::copy(b.begin(), b.begin() + 8, net.begin());
  inet_ntop(AF_INET6, net.data(), buf, sizeof buf);
  return std::string(buf) + "/64";
}

}  // namespace tollgate::policy
