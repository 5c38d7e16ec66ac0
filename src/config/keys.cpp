#include "config/keys.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <set>
#include <tollgate/util/ascii.hpp>
#include <tollgate/util/digest.hpp>

#include "config/files.hpp"
#include "config/limits.hpp"
#include "config/yaml.hpp"

namespace tollgate::config {
namespace internal {

Mode ParseMode(const YAML::Node& n, const std::string& path) {
  return ParseEnum<Mode>(n, path, {{"enforce", Mode::kEnforce}, {"shadow", Mode::kShadow}},
                         "enforce or shadow");
}

namespace {

// The key's digest: `key` (in clear, hashed here) or `sha256` (64 hex digits, either case).
std::string ReadDigest(const YAML::Node& n, const std::string& path) {
  if (n["key"] && n["sha256"]) Fail(path, "give key or sha256, not both");
  if (const YAML::Node key = n["key"]) {
    const std::string clear = Expanded(key, Join(path, "key"));  // a secret: ${NAME} works
    if (clear.empty()) Fail(Join(path, "key"), "must not be empty");
    return util::Sha256Hex(clear);
  }
  if (const YAML::Node d = n["sha256"]) {
    std::string hex = Str(d, Join(path, "sha256"));
    for (char& ch : hex) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
      Fail(Join(path, "sha256"), "must be 64 hex digits");
    }
    return hex;
  }
  if (n["cert_sha256"] || n["cert_name"]) return "";  // a key of client certificates only
  Fail(path, "key, sha256, cert_sha256 or cert_name is required");
}

// cert_sha256: a certificate's SHA-256 fingerprint, 64 hex digits in either case, with or without
// the colons `openssl x509 -fingerprint -sha256` prints.
std::string ReadFingerprint(const YAML::Node& n, const std::string& path) {
  std::string hex;
  for (char ch : Str(n, path)) {
    if (ch != ':') hex += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
    Fail(path, "must be a SHA-256 fingerprint: 64 hex digits, colons allowed");
  return hex;
}

// rate_limit_per_minute and rate_limit_burst: both or neither, checked by KeyWindowLimit.
void ReadPerKeyColumns(const YAML::Node& n, const std::string& path, KeyConfig& k) {
  const YAML::Node per_minute = n["rate_limit_per_minute"];
  const YAML::Node burst = n["rate_limit_burst"];
  if (!per_minute && !burst) return;
  if (!per_minute || !burst)
    Fail(path, "give both rate_limit_per_minute and rate_limit_burst, or neither");
  k.rate_limit_per_minute =
      Int(per_minute, Join(path, "rate_limit_per_minute"), INT64_MIN, INT64_MAX);
  k.rate_limit_burst = Int(burst, Join(path, "rate_limit_burst"), INT64_MIN, INT64_MAX);
  auto limit = KeyWindowLimit(*k.rate_limit_per_minute, *k.rate_limit_burst);
  if (!limit) FailUnder(path, limit.error());
}

KeyConfig ParseKey(const YAML::Node& n, const std::string& path,
                   const std::vector<PlanConfig>& plans) {
  OnlyKeys(n, path,
           {"key", "sha256", "cert_sha256", "cert_name", "id", "account", "plan", "mode",
            "overrides", "rate_limit_per_minute", "rate_limit_burst"});
  KeyConfig k;
  k.sha256_hex = ReadDigest(n, path);
  if (n["cert_sha256"])
    k.cert_sha256 = ReadFingerprint(n["cert_sha256"], Join(path, "cert_sha256"));
  if (n["cert_name"]) {
    k.cert_name = Name(n["cert_name"], Join(path, "cert_name"));
    if (k.cert_name.empty()) Fail(Join(path, "cert_name"), "must not be empty");
    // DNS names and CNs are compared in lower case; URIs (a SPIFFE ID) as written.
    if (k.cert_name.find("://") == std::string::npos) k.cert_name = util::AsciiLower(k.cert_name);
  }
  if (!n["id"]) Fail(Join(path, "id"), "required");
  k.id = Name(n["id"], Join(path, "id"));
  if (k.id.empty()) Fail(Join(path, "id"), "must not be empty");
  k.account = n["account"] ? Name(n["account"], Join(path, "account")) : k.id;
  if (!n["plan"]) Fail(Join(path, "plan"), "required");
  k.plan = Name(n["plan"], Join(path, "plan"));
  if (n["mode"]) k.mode = internal::ParseMode(n["mode"], Join(path, "mode"));
  // An unknown plan is not an error: the key gets the strictest plan (DESIGN.md).
  if (const YAML::Node o = n["overrides"]) {
    const PlanConfig* plan = nullptr;
    for (const auto& p : plans)
      if (p.name == k.plan) plan = &p;
    k.overrides = ReadOverrides(o, Join(path, "overrides"), k.plan, plan);
  }
  ReadPerKeyColumns(n, path, k);
  return k;
}

// The list of keys at `path` (`keys` or the keys file): ids and digests unique.
void ParseKeyList(const YAML::Node& keys, const std::string& path, Config& c) {
  if (!keys.IsSequence()) Fail(path, "must be a list of keys");
  std::set<std::string> ids, digests, fingerprints, cert_names;
  for (size_t i = 0; i < keys.size(); ++i) {
    const KeyConfig& k = c.keys.emplace_back(ParseKey(keys[i], Index(path, i), c.plans));
    if (!ids.insert(k.id).second) Fail(Join(Index(path, i), "id"), "duplicate '" + k.id + "'");
    if (!k.sha256_hex.empty() && !digests.insert(k.sha256_hex).second)
      Fail(Index(path, i), "duplicate key");
    if (!k.cert_sha256.empty() && !fingerprints.insert(k.cert_sha256).second)
      Fail(Join(Index(path, i), "cert_sha256"), "another key names this certificate");
    if (!k.cert_name.empty() && !cert_names.insert(k.cert_name).second)
      Fail(Join(Index(path, i), "cert_name"), "another key names '" + k.cert_name + "'");
  }
}

// keys: {source: postgres, url: ..., snapshot: ..., resync_seconds: ...}
void ReadKeySource(const YAML::Node& keys, const std::string& base_dir, KeySourceConfig& ks) {
  OnlyKeys(keys, "keys", {"source", "url", "snapshot", "resync_seconds"});
  const std::string source = keys["source"] ? Str(keys["source"], "keys.source") : "";
  // A map names the one source besides the file's own list.
  if (util::ValueOf(kKeySourceTypeNames, source) != KeySourceType::kPostgres)
    Fail("keys.source", "must be postgres (or give keys as a list)");
  ks.source = KeySourceType::kPostgres;
  if (!keys["url"]) Fail("keys.url", "required for keys.source postgres");
  ks.url = Secret(keys["url"], "keys.url");
  if (keys["snapshot"]) {
    ks.snapshot = Expanded(keys["snapshot"], "keys.snapshot");
    ks.snapshot = FromConfigDir(base_dir, ks.snapshot);
  }
  Set(keys, "resync_seconds", "keys", ks.resync_seconds, 1, 86'400);
}

// Assigns the YAML of `keys_file` (node `kf`) to `keys`, and its file name to `keys_path`.
void LoadKeysFile(const YAML::Node& kf, const std::string& base_dir, YAML::Node& keys,
                  std::string& keys_path) {
  std::string file = Expanded(kf, "keys_file");
  file = FromConfigDir(base_dir, file);
  // A regular file only: a FIFO or a device hung the loader (issue 31).
  auto text = ReadRegularFile(file);
  if (!text) Fail("keys_file", "cannot read '" + file + "': " + text.error());
  if (text->empty()) Fail("keys_file", "'" + file + "' is empty");
  try {
    keys.reset(YAML::Load(*text));  // rebinds: `keys = ...` would write into root["keys"]
  } catch (const YAML::Exception& e) {
    Fail("keys_file", file + ": " + e.what());
  }
  keys_path = file;
  RefuseDuplicateKeys(keys, keys_path);
}

}  // namespace

void ParseKeys(const YAML::Node& root, const std::string& base_dir, Config& c) {
  // A valid node either way: root["keys"] of a file without keys is a "zombie" node, which
  // yaml-cpp refuses to rebind (a keys_file was always refused for that).
  YAML::Node keys = root["keys"] ? root["keys"] : YAML::Node(YAML::NodeType::Undefined);
  std::string keys_path = "keys";
  if (keys && keys.IsMap()) {
    ReadKeySource(keys, base_dir, c.key_source);
    if (root["keys_file"]) Fail("keys_file", "give keys_file or keys.source, not both");
    keys.reset(
        YAML::Node(YAML::NodeType::Undefined));  // rebind: `keys = ...` writes into root["keys"]
  }
  if (const YAML::Node kf = root["keys_file"]) {
    if (keys) Fail("keys_file", "give keys or keys_file, not both");
    LoadKeysFile(kf, base_dir, keys, keys_path);
  }
  if (!keys) return;
  try {
    ParseKeyList(keys, keys_path, c);
  } catch (FieldError& e) {
    // The line of an error in the keys file is the keys file's (its path starts with the
    // file's name).
    if (e.line == 0 && keys_path != "keys" && e.path.rfind(keys_path, 0) == 0)
      e.line = LineOf(keys, e.path.substr(keys_path.size()));
    throw;
  }
}

}  // namespace internal

core::Result<int64_t> KeyWindowLimit(int64_t rate_limit_per_minute, int64_t rate_limit_burst) {
  // The same bound as every other configured count; the two together must fit as well.
  constexpr int64_t kMax = int64_t{1} << 53;
  if (rate_limit_per_minute < 1) {
    return core::Error{"rate_limit_per_minute: must be >= 1, got " +
                       std::to_string(rate_limit_per_minute)};
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
    return internal::ReadOverrides(node, "", plan.name, &plan);
  } catch (const internal::FieldError& e) {
    return core::Error{internal::ErrorText(e)};
  } catch (const YAML::Exception& e) {
    return core::Error{std::string("invalid overrides: ") + e.what()};
  }
}

std::vector<const KeyConfig*> KeysOfUnknownPlans(const Config& config) {
  std::set<std::string_view> plans;
  for (const PlanConfig& p : config.plans) plans.insert(p.name);
  std::vector<const KeyConfig*> out;
  for (const KeyConfig& k : config.keys) {
    if (!plans.count(k.plan)) out.push_back(&k);
  }
  return out;
}

std::vector<std::string> UnknownPlanWarnings(const Config& config) {
  std::vector<std::pair<std::string, std::vector<const KeyConfig*>>> by_plan;  // file order
  for (const KeyConfig* k : KeysOfUnknownPlans(config)) {
    auto it = std::find_if(by_plan.begin(), by_plan.end(),
                           [k](const auto& p) { return p.first == k->plan; });
    if (it == by_plan.end()) it = by_plan.insert(by_plan.end(), {k->plan, {}});
    it->second.push_back(k);
  }
  std::vector<std::string> out;
  for (const auto& [plan, keys] : by_plan) {
    std::string w = "key '" + keys[0]->id + "'";
    if (keys.size() > 1) w += " and " + std::to_string(keys.size() - 1) + " more";
    w += std::string(keys.size() > 1 ? " name" : " names") + " the plan '" + plan +
         "', which does not exist: " + (keys.size() > 1 ? "they get" : "it gets") +
         " the strictest plan";
    out.push_back(std::move(w));
  }
  return out;
}

bool IsFieldSafe(std::string_view text) {
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace tollgate::config
