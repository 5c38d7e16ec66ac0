// server.tls and server.admin_tls, and the files of TLS client sections (issue 33). Private to the
// config loader.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include <tollgate/config/config.hpp>

namespace tollgate::config::internal {

// The TLS block at `path`; fails naming the field. A relative file is relative to `base_dir`,
// the config file's directory; the files are checked when the listener starts.
TlsConfig ParseTls(const YAML::Node& n, const std::string& path, const std::string& base_dir);

// The PEM files of a TLS client section (store.tls, upstream.tls, upstreams.NAME.tls): each
// relative to the config file's directory and read here too, so that check-config finds a
// missing one; the certificate and its key go together. Their owner parses them.
struct PemFiles {
  std::string* ca_file;
  std::string* cert_file;
  std::string* key_file;
};
void ReadPemFiles(const YAML::Node& t, const std::string& section, const std::string& base_dir,
                  PemFiles files);

}  // namespace tollgate::config::internal
