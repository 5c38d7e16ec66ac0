#include "config/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tollgate::config::internal {
namespace {

const char* WhatItIs(mode_t mode) {
  if (S_ISDIR(mode)) return "is a directory";
  if (S_ISFIFO(mode)) return "is a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "is a device";
  if (S_ISSOCK(mode)) return "is a socket";
  return "is not a regular file";
}

}  // namespace

std::string FromConfigDir(const std::string& base_dir, std::string path) {
  if (path.empty() || path[0] == '/' || base_dir.empty()) return path;
  return base_dir + "/" + path;
}

core::Result<std::string> ReadRegularFile(const std::string& path) {
  if (path.empty()) return core::Error{"no file named"};
  // O_NONBLOCK: opening a FIFO without a writer (or some devices) would block in open(2).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return core::Error{std::strerror(errno)};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return core::Error{std::strerror(err)};
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return core::Error{WhatItIs(st.st_mode)};
  }
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return core::Error{std::strerror(err)};
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace tollgate::config::internal
