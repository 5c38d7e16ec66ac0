// server.tls and server.admin_tls (issue 33). Private to the config loader.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include <tollgate/config/config.hpp>

namespace tollgate::config::internal {

// The TLS block at `path`; fails naming the field. A relative file is relative to `base_dir`,
// the config file's directory; the files are checked when the listener starts.
TlsConfig ParseTls(const YAML::Node& n, const std::string& path, const std::string& base_dir);

}  // namespace tollgate::config::internal
