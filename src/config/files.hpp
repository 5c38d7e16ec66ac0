// Reading the files a configuration names (the config file itself, keys_file, `file:` secrets,
// store.tls PEM files, Envoy descriptor files). Private to the config loader.
#pragma once

#include <string>

#include <tollgate/core/result.hpp>

namespace tollgate::config::internal {

// The content of `path` when it is a regular file; otherwise an error saying what it is ("is a
// FIFO", "is a directory", "is a device", ...) or why it cannot be read (strerror). The file is
// opened without blocking and checked before it is read: a FIFO with no writer or a device
// never hangs the loader (issue 31: `keys_file: /dev/stdin` or a FIFO hung check-config).
core::Result<std::string> ReadRegularFile(const std::string& path);

// `path` as the config names it: a relative path is relative to the config file's directory
// (`base_dir`), as keys_file, envoy_config and the TLS files are.
std::string FromConfigDir(const std::string& base_dir, std::string path);

}  // namespace tollgate::config::internal
