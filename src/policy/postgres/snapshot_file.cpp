#include "policy/postgres/snapshot_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace json = boost::json;

namespace tollgate::policy::internal {
namespace {

constexpr int kSnapshotVersion = 1;

// The rows of the file's text; `bad` starts every error.
core::Result<std::vector<KeyRecord>> ParseSnapshot(const std::string& text,
                                                   const std::string& bad) {
  boost::system::error_code ec;
  const json::value root = json::parse(text, ec);
  if (ec) return core::Error{bad + "not valid JSON (" + ec.message() + ")"};
  const json::object* o = root.if_object();
  const json::value* version = o ? o->if_contains("version") : nullptr;
  if (!version || !version->is_int64() || version->get_int64() != kSnapshotVersion) {
    return core::Error{bad + "version: must be " + std::to_string(kSnapshotVersion)};
  }
  const json::value* keys = o->if_contains("keys");
  if (!keys || !keys->is_array()) return core::Error{bad + "keys: must be a list"};
  std::vector<KeyRecord> out;
  for (const json::value& k : keys->get_array()) out.push_back(RecordFromJson(k));
  return out;
}

// Writes all of `text` to `fd`. Returns "" or strerror.
std::string WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::strerror(errno);
    done += static_cast<size_t>(n);
  }
  return "";
}

// Syncs the directory of `path`, so that a rename into it survives a crash.
void SyncDirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

std::string SnapshotText(const std::vector<KeyRecord>& records, int64_t written_at_unix_s) {
  std::string text = "{\"version\":" + std::to_string(kSnapshotVersion) +
                     ",\"written_at_unix_s\":" + std::to_string(written_at_unix_s) + ",\"keys\":[";
  bool first = true;
  for (const KeyRecord& r : records) {
    text += first ? "\n" : ",\n";
    text += json::serialize(RecordJson(r));
    first = false;
  }
  text += "\n]}\n";
  return text;
}

core::Result<std::vector<KeyRecord>> ReadSnapshotFile(const std::string& path) {
  if (path.empty()) return core::Error{"no snapshot file is configured (snapshot_path is empty)"};
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return core::Error{"there is no snapshot file at '" + path + "'"};
    return core::Error{"the snapshot file '" + path + "' cannot be read: " + std::strerror(errno)};
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseSnapshot(ss.str(), "the snapshot file '" + path + "' cannot be used: ");
}

std::string WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create '" + tmp + "': " + std::strerror(errno);
  if (const std::string e = WriteAll(fd, text); !e.empty()) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return "cannot write '" + tmp + "': " + e;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string e = std::strerror(errno);
    ::unlink(tmp.c_str());
    return "cannot write '" + tmp + "': " + e;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string e = std::strerror(errno);
    ::unlink(tmp.c_str());
    return "cannot rename '" + tmp + "' to '" + path + "': " + e;
  }
  SyncDirectoryOf(path);  // the rename itself survives a crash
  return "";
}

}  // namespace tollgate::policy::internal
