// Reading the API keys of the configuration: a `keys:` list, a `keys_file`, or a key source
// (`keys: {source: postgres, ...}`). Private to the config loader; failures throw FieldError.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <tollgate/config/config.hpp>

namespace tollgate::config::internal {

// `enforce` or `shadow`.
Mode ParseMode(const YAML::Node& n, const std::string& path);

// Reads `keys` / `keys_file` of `root` into c.keys or c.key_source; relative file paths are
// relative to `base_dir`. REQUIRES: c.plans read (a key's overrides name its plan's limits).
void ParseKeys(const YAML::Node& root, const std::string& base_dir, Config& c);

}  // namespace tollgate::config::internal
