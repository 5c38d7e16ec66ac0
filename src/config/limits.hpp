// Reading limits: a plan's or the anonymous limits, identity.invalid_key_limit, and a key's
// overrides of its plan's limits. Private to the config loader; failures throw FieldError.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <set>
#include <string>
#include <tollgate/config/config.hpp>
#include <vector>

namespace tollgate::config::internal {

// Every field a limit may have (name, algorithm, capacity, refill_per_*, limit, ...), without
// from_key (plan limits only) and expires (overrides only).
const std::set<std::string>& LimitFields();

// Reads the limit fields present in `n` into `spec` (which may hold a plan's values already,
// for overrides), then validates the result.
void ReadLimitFields(const YAML::Node& n, const std::string& path, core::LimitSpec& spec);

// `key`, `account`, `ip` or `global`.
LimitScope ParseScope(const YAML::Node& n, const std::string& path);

// One named limit. `plan_limit`: a plan's, which may take its limit from the key (`from_key`)
// and carry a `scope`. `extra_fields`: more fields the caller reads itself (a route limit's
// `scope` and `plans`).
LimitConfig ParseLimit(const YAML::Node& n, const std::string& path, bool plan_limit,
                       const std::set<std::string>& extra_fields);

// A list of at most 8 named limits. `plan_limits`: a plan's, which may take their limit from
// the key (`from_key`).
std::vector<LimitConfig> ParseLimits(const YAML::Node& n, const std::string& path,
                                     bool plan_limits);

// The overrides of a key on plan `plan_name` (`plan`: null when unknown) under `path`: a map of
// limit name -> fields. The YAML loader and ParseOverrides (other key sources) share it.
std::vector<OverrideConfig> ReadOverrides(const YAML::Node& o, const std::string& path,
                                          const std::string& plan_name, const PlanConfig* plan);

}  // namespace tollgate::config::internal
