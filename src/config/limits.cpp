#include "config/limits.hpp"

#include <string_view>
#include <utility>

#include "config/yaml.hpp"

namespace tollgate::config::internal {
namespace {

// The same bound for every configured count: what a double holds exactly.
constexpr int64_t kMax = int64_t{1} << 53;

void ReadAlgorithm(const YAML::Node& n, const std::string& path, core::LimitSpec& spec) {
  if (const YAML::Node a = n["algorithm"]) {
    auto alg = core::ParseAlgorithm(Str(a, Join(path, "algorithm")));
    if (!alg) Fail(Join(path, "algorithm"), alg.error().substr(alg.error().find(':') + 2));
    spec.algorithm = *alg;
  }
}

// refill_per_second, refill_per_minute or refill_per_hour: at most one of them.
void ReadRefill(const YAML::Node& n, const std::string& path, core::LimitSpec& spec) {
  int rates = 0;
  for (auto [key, seconds] :
       {std::pair{"refill_per_second", 1}, {"refill_per_minute", 60}, {"refill_per_hour", 3600}}) {
    if (const YAML::Node r = n[key]) {
      ++rates;
      auto rate = core::Rate::Parse(Str(r, Join(path, key)), seconds);
      if (!rate) Fail(Join(path, key), rate.error());
      spec.refill = *rate;
    }
  }
  if (rates > 1) Fail(path, "give one of refill_per_second, refill_per_minute, refill_per_hour");
}

void ReadWindow(const YAML::Node& n, const std::string& path, core::LimitSpec& spec) {
  if (const YAML::Node w = n["window_seconds"]) {
    const std::string s = Str(w, Join(path, "window_seconds"));
    auto r = core::Rate::Parse(s, 1);  // a positive decimal with at most 6 decimals
    if (!r) Fail(Join(path, "window_seconds"), r.error());
    // tokens/per_micros was reduced; the window in microseconds is the decimal times 1e6.
    const __int128 us = static_cast<__int128>(r->tokens) * 1'000'000 * 1'000'000 / r->per_micros;
    if (us > kMax) Fail(Join(path, "window_seconds"), "too large");
    spec.window = core::Duration::Micros(static_cast<int64_t>(us));
  }
}

void ReadQuota(const YAML::Node& n, const std::string& path, core::LimitSpec& spec) {
  if (const YAML::Node p = n["period"]) {
    const std::string s = Str(p, Join(path, "period"));
    if (s == "day")
      spec.period = core::Period::kDay;
    else if (s == "month")
      spec.period = core::Period::kMonth;
    else
      Fail(Join(path, "period"), "must be day or month, got '" + s + "'");
  }
  if (const YAML::Node a = n["allowance"])
    spec.allowance = Int(a, Join(path, "allowance"), 1, kMax);
  if (const YAML::Node c = n["ceiling"]) spec.ceiling = Int(c, Join(path, "ceiling"), 1, kMax);
}

// `on_limit: reject | delay` and `max_delay_ms` (smoothing, token buckets only): given
// together or not at all. REQUIRES: the algorithm is read.
void ReadOnLimit(const YAML::Node& n, const std::string& path, core::LimitSpec& spec) {
  const YAML::Node on_limit = n["on_limit"];
  const YAML::Node max_delay = n["max_delay_ms"];
  bool delay = spec.max_delay.micros() > 0;  // an override keeps its plan limit's
  if (on_limit) {
    delay = ParseEnum<bool>(on_limit, Join(path, "on_limit"), {{"reject", false}, {"delay", true}},
                            "reject or delay");
    if (delay && spec.algorithm != core::Algorithm::kTokenBucket) {
      Fail(Join(path, "on_limit"), "delay needs algorithm token_bucket (a schedule of tokens)");
    }
    if (!delay) spec.max_delay = core::Duration();
  }
  if (max_delay) {
    if (!delay) Fail(Join(path, "max_delay_ms"), "needs on_limit: delay");
    spec.max_delay = core::Duration::Millis(Int(max_delay, Join(path, "max_delay_ms"), 1, 60'000));
  } else if (on_limit && delay && spec.max_delay.micros() == 0) {
    Fail(Join(path, "max_delay_ms"), "required with on_limit: delay");
  }
}

// Fields that do not belong to the algorithm are mistakes, not silently ignored; the fields
// an algorithm needs are required.
void CheckFieldsFitAlgorithm(const YAML::Node& n, const std::string& path,
                             const core::LimitSpec& spec) {
  using core::Algorithm;
  const Algorithm alg = spec.algorithm;
  auto forbid = [&](const char* key, bool applies) {
    if (n[key] && !applies) {
      Fail(Join(path, key),
           std::string("does not apply to algorithm ") + std::string(core::AlgorithmName(alg)));
    }
  };
  const bool bucket = alg == Algorithm::kTokenBucket;
  const bool window = alg == Algorithm::kSlidingWindowLog ||
                      alg == Algorithm::kSlidingWindowCounter || alg == Algorithm::kFixedWindow;
  const bool quota = alg == Algorithm::kQuota;
  forbid("capacity", bucket);
  forbid("lease", bucket);
  forbid("refill_per_second", bucket);
  forbid("refill_per_minute", bucket);
  forbid("refill_per_hour", bucket);
  forbid("limit", window);
  forbid("window_seconds", window);
  forbid("period", quota);
  forbid("allowance", quota);
  forbid("ceiling", quota);
  if (bucket && spec.capacity == 0) Fail(Join(path, "capacity"), "required for token_bucket");
  if (bucket && spec.refill.tokens == 0)
    Fail(Join(path, "refill_per_second"), "required for token_bucket");
  if (window && spec.limit == 0)
    Fail(Join(path, "limit"), "required for " + std::string(core::AlgorithmName(alg)));
  if (window && spec.window.micros() == 0)
    Fail(Join(path, "window_seconds"), "required for " + std::string(core::AlgorithmName(alg)));
}

// A plan limit's `from_key`: only for window algorithms counting over one minute.
void ReadFromKey(const YAML::Node& f, const std::string& path, bool plan_limit, LimitConfig& l) {
  const std::string fpath = Join(path, "from_key");
  if (!plan_limit) Fail(fpath, "only plan limits can take their limit from the key");
  l.from_key = Bool(f, fpath);
  using core::Algorithm;
  const Algorithm alg = l.spec.algorithm;
  if (l.from_key && alg != Algorithm::kSlidingWindowLog &&
      alg != Algorithm::kSlidingWindowCounter && alg != Algorithm::kFixedWindow) {
    Fail(fpath, std::string("does not apply to algorithm ") +
                    std::string(core::AlgorithmName(alg)) +
                    " (the key's columns are a request count per minute)");
  }
  // rate_limit_per_minute + rate_limit_burst is a count over one minute (issue 5).
  if (l.from_key && l.spec.window.micros() != 60'000'000) {
    Fail(Join(path, "window_seconds"),
         "must be 60 with from_key (the key's columns are per minute)");
  }
}

}  // namespace

LimitScope ParseScope(const YAML::Node& n, const std::string& path) {
  return ParseEnum<LimitScope>(n, path,
                               {{"key", LimitScope::kKey},
                                {"account", LimitScope::kAccount},
                                {"ip", LimitScope::kIp},
                                {"global", LimitScope::kGlobal}},
                               "key, account, ip or global");
}

LimitConfig ParseLimit(const YAML::Node& n, const std::string& path, bool plan_limit,
                       const std::set<std::string>& extra_fields) {
  std::set<std::string> allowed = LimitFields();
  allowed.insert("from_key");
  if (plan_limit) allowed.insert("scope");
  allowed.insert(extra_fields.begin(), extra_fields.end());
  OnlyKeys(n, path, allowed);
  LimitConfig l;
  if (!n["name"]) Fail(Join(path, "name"), "required");
  l.name = Name(n["name"], Join(path, "name"));
  if (l.name.empty() || l.name.find_first_of(" \t\",;:{}") != std::string::npos) {
    Fail(Join(path, "name"), "must be a plain word (letters, digits, - or _)");
  }
  ReadLimitFields(n, path, l.spec);
  if (const YAML::Node f = n["from_key"]) ReadFromKey(f, path, plan_limit, l);
  if (const YAML::Node s = n["scope"]) l.scope = ParseScope(s, Join(path, "scope"));
  return l;
}

namespace {

// "2026-12-31" or "2026-12-31T23:00:00Z" (UTC), exactly: digits where digits go, a date that
// exists (not 2026-02-30), a time of day within 00:00:00-23:59:59.
int64_t ParseExpiry(const std::string& s, const std::string& path) {
  static constexpr std::string_view kDate = "dddd-dd-dd", kTime = "dddd-dd-ddTdd:dd:ddZ";
  auto shaped = [&s](std::string_view shape) {
    if (s.size() != shape.size()) return false;
    for (size_t i = 0; i < shape.size(); ++i) {
      const bool digit = s[i] >= '0' && s[i] <= '9';
      if (shape[i] == 'd' ? !digit : s[i] != shape[i]) return false;
    }
    return true;
  };
  auto number = [&s](size_t at, size_t len) { return std::stoi(s.substr(at, len)); };
  const bool date_only = shaped(kDate);
  if (date_only || shaped(kTime)) {
    const core::CivilDate date{number(0, 4), number(5, 2), number(8, 2)};
    const int h = date_only ? 0 : number(11, 2);
    const int mi = date_only ? 0 : number(14, 2);
    const int sec = date_only ? 0 : number(17, 2);
    const bool valid_date = date.month >= 1 && date.month <= 12 && date.day >= 1 &&
                            core::CivilFromDays(core::DaysFromCivil(date)) == date;
    if (valid_date && h <= 23 && mi <= 59 && sec <= 59) {
      return core::DaysFromCivil(date) * 86'400 + h * 3600 + mi * 60 + sec;
    }
  }
  Fail(path, "must be a UTC date (2026-12-31) or time (2026-12-31T23:00:00Z), got '" + s + "'");
}

}  // namespace

const std::set<std::string>& LimitFields() {
  static const std::set<std::string> kLimitFields = {"name",
                                                     "algorithm",
                                                     "capacity",
                                                     "refill_per_second",
                                                     "refill_per_minute",
                                                     "refill_per_hour",
                                                     "limit",
                                                     "window_seconds",
                                                     "period",
                                                     "allowance",
                                                     "ceiling",
                                                     "on_limit",
                                                     "max_delay_ms",
                                                     "lease"};
  return kLimitFields;
}

void ReadLimitFields(const YAML::Node& n, const std::string& path, core::LimitSpec& spec) {
  ReadAlgorithm(n, path, spec);
  Set(n, "capacity", path, spec.capacity, 1, kMax);
  Set(n, "limit", path, spec.limit, 1, kMax);
  Set(n, "lease", path, spec.lease, 0, kMax);
  ReadRefill(n, path, spec);
  ReadWindow(n, path, spec);
  ReadQuota(n, path, spec);
  ReadOnLimit(n, path, spec);
  CheckFieldsFitAlgorithm(n, path, spec);
  auto limit = core::Limit::Create(spec);
  if (!limit) FailUnder(path, limit.error());
}

std::vector<LimitConfig> ParseLimits(const YAML::Node& n, const std::string& path,
                                     bool plan_limits) {
  if (!n.IsSequence()) Fail(path, "must be a list of limits");
  std::vector<LimitConfig> out;
  std::set<std::string> names;
  for (size_t i = 0; i < n.size(); ++i) {
    out.push_back(ParseLimit(n[i], Index(path, i), plan_limits, {}));
    if (!names.insert(out.back().name).second)
      Fail(Join(Index(path, i), "name"), "duplicate '" + out.back().name + "'");
  }
  if (out.size() > 8) Fail(path, "at most 8 limits");
  return out;
}

std::vector<OverrideConfig> ReadOverrides(const YAML::Node& o, const std::string& path,
                                          const std::string& plan_name, const PlanConfig* plan) {
  RequireMap(o, path);
  std::vector<OverrideConfig> out;
  for (const auto& kv : o) {
    const std::string name = kv.first.as<std::string>();
    const std::string opath = Join(path, name);
    const LimitConfig* base = nullptr;
    if (plan)
      for (const auto& l : plan->limits)
        if (l.name == name) base = &l;
    if (!base) Fail(opath, "plan '" + plan_name + "' has no limit named '" + name + "'");
    std::set<std::string> allowed = LimitFields();
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

}  // namespace tollgate::config::internal
