// envoyproxy/ratelimit's descriptor configuration files, read as they are (rls.envoy_config):
// domains, nested descriptors, rate limits, replaces, shadow_mode and detailed_metric, with
// the matching its README documents. docs/envoy-ratelimit.md says where tollgate differs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <tollgate/core/limit.hpp>
#include <tollgate/core/result.hpp>

namespace tollgate::config {

// Envoy's RateLimitResponse.RateLimit.Unit numbers. Windows are fixed and aligned to the epoch
// in whole units, as envoyproxy/ratelimit counts them (a month is 30 days, a year 365).
enum class EnvoyUnit : uint8_t {
  kSecond = 1,
  kMinute = 2,
  kHour = 3,
  kDay = 4,
  kMonth = 5,
  kYear = 6,
  kWeek = 7,
};
int64_t EnvoyUnitSeconds(EnvoyUnit unit);
std::string_view EnvoyUnitName(EnvoyUnit unit);  // "second", ...
// The unit of a RateLimitOverride (Envoy's number), or nullopt for UNKNOWN and others.
std::optional<EnvoyUnit> EnvoyUnitFromNumber(int64_t number);

struct EnvoyRateLimit {
  std::string name;                   // what `replaces` names; Envoy sees it as current_limit.name
  std::vector<std::string> replaces;  // names this limit takes the place of
  bool unlimited = false;             // OK, limit_remaining 2^32-1, no store call
  uint32_t requests_per_unit = 0;     // 0: always over limit
  EnvoyUnit unit = EnvoyUnit::kSecond;
  // tollgate's extension (`algorithm:`): fixed_window (upstream's counting, the default),
  // token_bucket (capacity requests_per_unit, refilled over one unit) or
  // sliding_window_counter / sliding_window_log over one unit.
  core::Algorithm algorithm = core::Algorithm::kFixedWindow;
  // The limit the store decides; absent when unlimited or requests_per_unit is 0.
  std::optional<core::Limit> limit;
};

// One entry of a descriptor list, with its nested list.
class EnvoyDescriptor {
 public:
  std::string key;
  std::string value;    // empty: any value; for a prefix, the text before the '*'
  bool prefix = false;  // the configured value ended in '*'
  std::optional<EnvoyRateLimit> rate_limit;
  bool shadow_mode = false;      // decided and counted, but always answered OK
  bool detailed_metric = false;  // statistics per request value, not rolled up into the key
  std::string stat_key;          // "message_type_marketing.to_number", as upstream names stats
  std::vector<EnvoyDescriptor> descriptors;

  // The nested entry a request entry (key, value) matches: key and value first, then a value
  // prefix (the first configured), then the key alone; null when none does.
  const EnvoyDescriptor* Child(std::string_view entry_key, std::string_view entry_value) const;
  // Builds the lookup tables of this level and the levels below (after loading).
  void Index();

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // "key\0value" and "key" -> index into descriptors.
  std::unordered_map<std::string, size_t, Hash, std::equal_to<>> exact_;
  std::unordered_map<std::string, size_t, Hash, std::equal_to<>> any_value_;
  std::vector<size_t> prefixes_;
};

struct EnvoyDomain {
  std::string domain;
  std::string file;      // where it was read
  EnvoyDescriptor root;  // its `descriptors`, as the children of a root without key
};

// A request descriptor's entries, as views.
using EnvoyEntries = std::span<const std::pair<std::string_view, std::string_view>>;

// What a request descriptor matched: the entry at the same depth as the request's last entry
// that has a rate_limit (Example 4 of upstream's README), and the statistics name.
struct EnvoyMatch {
  const EnvoyDescriptor* descriptor = nullptr;  // null: no limit applies (answered OK)
  // The stats path: the matched entries' stat_key, or with detailed_metric the request's own
  // key_value pairs.
  std::string stat_key;
};

// Immutable once loaded; shared by the RLS server's calls.
struct EnvoyRlsConfig {
  std::vector<EnvoyDomain> domains;
  std::vector<std::string> files;  // read, in order

  const EnvoyDomain* Find(std::string_view domain) const;
  static EnvoyMatch Match(const EnvoyDomain& domain, EnvoyEntries entries);
};

// Reads `path`: one YAML file, or every `*.yaml` and `*.yml` file of a directory (not its
// subdirectories, no dot files), in name order. Errors name the file and the field:
// "ratelimit/config/a.yaml: descriptors[0].rate_limit.unit: must be one of ...".
// A domain in two files, an entry with an empty key, a key and value twice on one level, an
// unknown field, and `replaces` that form a cycle are refused.
core::Result<EnvoyRlsConfig> LoadEnvoyRlsConfig(const std::string& path);

// The same from texts in memory: (file name, YAML text) pairs (tests).
core::Result<EnvoyRlsConfig> ParseEnvoyRlsConfig(
    std::span<const std::pair<std::string, std::string>> files);

}  // namespace tollgate::config
