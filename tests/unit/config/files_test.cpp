#include "config/files.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace tollgate::config::internal {
namespace {

// Issue 31: `keys_file` naming a FIFO (or /dev/stdin, a device) hung check-config.
TEST(ReadRegularFile, ReadsRegularFilesAndRefusesEverythingElseWithoutBlocking) {
  char tmpl[] = "/tmp/tollgate-files-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string file = dir + "/a.yaml";
  std::ofstream(file) << "plans: {}\n";
  const std::string empty = dir + "/empty";
  std::ofstream(empty).flush();
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string sock = dir + "/sock";
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(s, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);

  auto r = ReadRegularFile(file);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(*r, "plans: {}\n");
  r = ReadRegularFile(empty);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(*r, "");
  const std::pair<std::string, std::string> refused[] = {
      {fifo, "is a FIFO"},
      {dir, "is a directory"},
      {"/dev/null", "is a device"},
      {"/dev/zero", "is a device"},
      {sock, "No such device or address"},  // open(2) of a socket fails: ENXIO
      {dir + "/missing", "No such file or directory"},
      {"", "no file named"},
  };
  for (const auto& [path, why] : refused) {
    const auto e = ReadRegularFile(path);
    ASSERT_FALSE(e.ok()) << path;
    EXPECT_EQ(e.error(), why) << path;
  }
  ::close(s);
  std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace tollgate::config::internal
