#include <tollgate/config/envoy_rls.hpp>

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>

#include "config/files.hpp"
#include "config/yaml.hpp"

namespace tollgate::config {
namespace {

using internal::Bool;
using internal::Fail;
using internal::FailUnder;
using internal::FieldError;
using internal::Index;
using internal::Int;
using internal::Join;
using internal::OnlyKeys;
using internal::Str;

struct UnitInfo {
  EnvoyUnit unit;
  std::string_view name;
  int64_t seconds;
};
constexpr UnitInfo kUnits[] = {
    {EnvoyUnit::kSecond, "second", 1},        {EnvoyUnit::kMinute, "minute", 60},
    {EnvoyUnit::kHour, "hour", 3'600},        {EnvoyUnit::kDay, "day", 86'400},
    {EnvoyUnit::kWeek, "week", 7 * 86'400},   {EnvoyUnit::kMonth, "month", 30 * 86'400},
    {EnvoyUnit::kYear, "year", 365 * 86'400},
};

const UnitInfo& Info(EnvoyUnit unit) {
  for (const UnitInfo& u : kUnits) {
    if (u.unit == unit) return u;
  }
  return kUnits[0];
}

EnvoyUnit ParseUnit(const YAML::Node& n, const std::string& path) {
  // Upstream upper-cases the unit before reading it: "second", "SECOND" and "Second" all work.
  std::string s = Str(n, path);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const UnitInfo& u : kUnits) {
    if (s == u.name) return u.unit;
  }
  Fail(path, "must be second, minute, hour, day, week, month or year, got '" + Str(n, path) + "'");
}

core::Limit CreateLimit(const EnvoyRateLimit& rl, const std::string& path) {
  core::LimitSpec spec;
  spec.algorithm = rl.algorithm;
  const core::Duration unit = core::Duration::Seconds(EnvoyUnitSeconds(rl.unit));
  if (rl.algorithm == core::Algorithm::kTokenBucket) {
    spec.capacity = rl.requests_per_unit;
    spec.refill = core::Rate::Of(rl.requests_per_unit, unit);
  } else {
    spec.limit = rl.requests_per_unit;
    spec.window = unit;
  }
  auto limit = core::Limit::Create(spec);
  if (!limit) FailUnder(path, limit.error());
  return *std::move(limit);
}

EnvoyRateLimit ParseRateLimit(const YAML::Node& n, const std::string& path) {
  OnlyKeys(n, path, {"name", "replaces", "unlimited", "unit", "requests_per_unit", "algorithm"});
  EnvoyRateLimit rl;
  if (n["name"]) rl.name = Str(n["name"], Join(path, "name"));
  if (const YAML::Node r = n["replaces"]) {
    const std::string rp = Join(path, "replaces");
    if (!r.IsSequence()) Fail(rp, "must be a list of {name: ...}");
    for (size_t i = 0; i < r.size(); ++i) {
      OnlyKeys(r[i], Index(rp, i), {"name"});
      if (!r[i]["name"]) Fail(Join(Index(rp, i), "name"), "required");
      std::string name = Str(r[i]["name"], Join(Index(rp, i), "name"));
      if (name.empty()) Fail(Join(Index(rp, i), "name"), "must not be empty");
      rl.replaces.push_back(std::move(name));
    }
  }
  if (n["unlimited"]) rl.unlimited = Bool(n["unlimited"], Join(path, "unlimited"));
  if (rl.unlimited) {
    // As upstream: an unlimited limit has no unit or rate.
    if (n["unit"]) Fail(Join(path, "unit"), "must not be given with unlimited: true");
    if (n["requests_per_unit"])
      Fail(Join(path, "requests_per_unit"), "must not be given with unlimited: true");
    if (n["algorithm"]) Fail(Join(path, "algorithm"), "must not be given with unlimited: true");
    return rl;
  }
  if (!n["unit"]) Fail(Join(path, "unit"), "required (or unlimited: true)");
  rl.unit = ParseUnit(n["unit"], Join(path, "unit"));
  if (!n["requests_per_unit"]) Fail(Join(path, "requests_per_unit"), "required");
  rl.requests_per_unit = static_cast<uint32_t>(
      Int(n["requests_per_unit"], Join(path, "requests_per_unit"), 0, UINT32_MAX));
  if (n["algorithm"]) {
    rl.algorithm = internal::ParseEnum<core::Algorithm>(
        n["algorithm"], Join(path, "algorithm"),
        {{"fixed_window", core::Algorithm::kFixedWindow},
         {"token_bucket", core::Algorithm::kTokenBucket},
         {"sliding_window_counter", core::Algorithm::kSlidingWindowCounter},
         {"sliding_window_log", core::Algorithm::kSlidingWindowLog}},
        "fixed_window, token_bucket, sliding_window_counter or sliding_window_log");
  }
  if (rl.requests_per_unit > 0) rl.limit = CreateLimit(rl, path);
  return rl;
}

void ParseDescriptors(const YAML::Node& list, const std::string& path, const std::string& stat,
                      EnvoyDescriptor& parent) {
  if (!list.IsSequence()) Fail(path, "must be a list");
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string p = Index(path, i);
    const YAML::Node n = list[i];
    OnlyKeys(n, p, {"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric"});
    EnvoyDescriptor d;
    if (!n["key"]) Fail(Join(p, "key"), "required");
    d.key = Str(n["key"], Join(p, "key"));
    if (d.key.empty()) Fail(Join(p, "key"), "must not be empty");
    if (n["value"]) d.value = Str(n["value"], Join(p, "value"));
    const std::string configured_value = d.value;
    if (!seen.insert({d.key, d.value}).second) {
      Fail(p, "key '" + d.key + "'" + (d.value.empty() ? "" : " value '" + d.value + "'") +
                  " appears twice in this list");
    }
    if (!d.value.empty() && d.value.back() == '*') {
      d.prefix = true;
      d.value.pop_back();
    }
    d.stat_key = (stat.empty() ? "" : stat + ".") + d.key +
                 (configured_value.empty() ? "" : "_" + configured_value);
    if (n["rate_limit"]) d.rate_limit = ParseRateLimit(n["rate_limit"], Join(p, "rate_limit"));
    if (n["shadow_mode"]) d.shadow_mode = Bool(n["shadow_mode"], Join(p, "shadow_mode"));
    if (n["detailed_metric"])
      d.detailed_metric = Bool(n["detailed_metric"], Join(p, "detailed_metric"));
    if (const YAML::Node nested = n["descriptors"])
      ParseDescriptors(nested, Join(p, "descriptors"), d.stat_key, d);
    parent.descriptors.push_back(std::move(d));
  }
}

void CollectReplaces(const EnvoyDescriptor& d, std::map<std::string, std::set<std::string>>& g) {
  if (d.rate_limit && !d.rate_limit->name.empty()) g[d.rate_limit->name];
  if (d.rate_limit) {
    for (const std::string& r : d.rate_limit->replaces) {
      // A limit without a name replaces under the empty name: it can be in no cycle.
      if (!d.rate_limit->name.empty()) g[d.rate_limit->name].insert(r);
    }
  }
  for (const EnvoyDescriptor& c : d.descriptors) CollectReplaces(c, g);
}

// Refuses names that replace, through a chain, themselves: every limit of such a chain would
// drop every other, and which one decides would depend on the request's descriptor order.
void CheckReplacesCycles(const EnvoyDescriptor& root) {
  std::map<std::string, std::set<std::string>> g;
  CollectReplaces(root, g);
  std::map<std::string, int> state;  // 1: on the path, 2: done
  std::vector<std::string> path;
  std::function<void(const std::string&)> visit = [&](const std::string& name) {
    state[name] = 1;
    path.push_back(name);
    if (auto it = g.find(name); it != g.end()) {
      for (const std::string& next : it->second) {
        if (state[next] == 1) {
          std::string cycle;
          for (auto p = std::find(path.begin(), path.end(), next); p != path.end(); ++p)
            cycle += *p + " -> ";
          Fail("replaces", "a cycle: " + cycle + next);
        }
        if (state[next] == 0) visit(next);
      }
    }
    path.pop_back();
    state[name] = 2;
  };
  for (const auto& [name, _] : g) {
    if (state[name] == 0) visit(name);
  }
}

EnvoyDomain ParseFile(const std::string& file, const std::string& text) {
  EnvoyDomain domain;
  domain.file = file;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    Fail("", std::string("not YAML: ") + e.what());
  }
  if (!root || root.IsNull()) Fail("", "the file is empty");
  internal::RefuseDuplicateKeys(root, "");  // issue 31: YAML would keep one of them
  OnlyKeys(root, "", {"domain", "descriptors"});
  if (!root["domain"]) Fail("domain", "required");
  domain.domain = Str(root["domain"], "domain");
  if (domain.domain.empty()) Fail("domain", "must not be empty");
  if (const YAML::Node d = root["descriptors"]) ParseDescriptors(d, "descriptors", "", domain.root);
  CheckReplacesCycles(domain.root);
  domain.root.Index();
  return domain;
}

bool IsYamlFile(const std::string& name) {
  auto ends = [&](std::string_view s) {
    return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return name[0] != '.' && (ends(".yaml") || ends(".yml"));
}

}  // namespace

int64_t EnvoyUnitSeconds(EnvoyUnit unit) { return Info(unit).seconds; }
std::string_view EnvoyUnitName(EnvoyUnit unit) { return Info(unit).name; }

std::optional<EnvoyUnit> EnvoyUnitFromNumber(int64_t number) {
  for (const UnitInfo& u : kUnits) {
    if (static_cast<int64_t>(u.unit) == number) return u.unit;
  }
  return std::nullopt;
}

void EnvoyDescriptor::Index() {
  exact_.clear();
  any_value_.clear();
  prefixes_.clear();
  for (size_t i = 0; i < descriptors.size(); ++i) {
    EnvoyDescriptor& d = descriptors[i];
    if (d.prefix)
      prefixes_.push_back(i);
    else if (d.value.empty())
      any_value_.emplace(d.key, i);
    else
      exact_.emplace(d.key + std::string(1, '\0') + d.value, i);
    d.Index();
  }
}

const EnvoyDescriptor* EnvoyDescriptor::Child(std::string_view entry_key,
                                              std::string_view entry_value) const {
  if (!exact_.empty()) {
    std::string k;
    k.reserve(entry_key.size() + 1 + entry_value.size());
    k.append(entry_key).push_back('\0');
    k.append(entry_value);
    if (auto it = exact_.find(std::string_view(k)); it != exact_.end())
      return &descriptors[it->second];
  }
  for (size_t i : prefixes_) {
    const EnvoyDescriptor& d = descriptors[i];
    if (d.key == entry_key && entry_value.substr(0, d.value.size()) == d.value) return &d;
  }
  if (auto it = any_value_.find(entry_key); it != any_value_.end()) return &descriptors[it->second];
  return nullptr;
}

const EnvoyDomain* EnvoyRlsConfig::Find(std::string_view domain) const {
  for (const EnvoyDomain& d : domains) {
    if (d.domain == domain) return &d;
  }
  return nullptr;
}

EnvoyMatch EnvoyRlsConfig::Match(const EnvoyDomain& domain, EnvoyEntries entries) {
  EnvoyMatch match;
  const EnvoyDescriptor* level = &domain.root;
  std::string detailed;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& [key, value] = entries[i];
    const EnvoyDescriptor* next = level->Child(key, value);
    if (!next) return match;
    if (!detailed.empty()) detailed += '.';
    detailed.append(key).append("_").append(value);
    if (i + 1 == entries.size()) {
      if (!next->rate_limit) return match;
      match.descriptor = next;
      match.stat_key = next->detailed_metric ? std::move(detailed) : next->stat_key;
      return match;
    }
    level = next;
  }
  return match;
}

core::Result<EnvoyRlsConfig> ParseEnvoyRlsConfig(
    std::span<const std::pair<std::string, std::string>> files) {
  EnvoyRlsConfig config;
  for (const auto& [file, text] : files) {
    try {
      EnvoyDomain domain = ParseFile(file, text);
      if (const EnvoyDomain* other = config.Find(domain.domain)) {
        return core::Error{file + ": domain: '" + domain.domain + "' is already defined in " +
                           other->file};
      }
      config.domains.push_back(std::move(domain));
      config.files.push_back(file);
    } catch (const FieldError& e) {
      const std::string line = e.line > 0 ? "line " + std::to_string(e.line) + ": " : "";
      return core::Error{file + ": " + line + internal::ErrorText(e)};
    } catch (const YAML::Exception& e) {
      return core::Error{file + ": " + e.what()};
    }
  }
  return config;
}

core::Result<EnvoyRlsConfig> LoadEnvoyRlsConfig(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return core::Error{path + ": cannot read"};
  std::vector<std::string> paths;
  if (S_ISDIR(st.st_mode)) {
    DIR* dir = ::opendir(path.c_str());
    if (!dir) return core::Error{path + ": cannot read the directory"};
    while (const dirent* e = ::readdir(dir)) {
      const std::string name = e->d_name;
      if (IsYamlFile(name)) paths.push_back(path + "/" + name);
    }
    ::closedir(dir);
    std::sort(paths.begin(), paths.end());
  } else {
    paths.push_back(path);
  }
  std::vector<std::pair<std::string, std::string>> files;
  for (const std::string& p : paths) {
    // A FIFO or device among the descriptor files would hang the load (issue 31).
    auto content = internal::ReadRegularFile(p);
    if (!content) return core::Error{p + ": cannot read: " + content.error()};
    files.emplace_back(p, std::move(content).value());
  }
  return ParseEnvoyRlsConfig(files);
}

}  // namespace tollgate::config
