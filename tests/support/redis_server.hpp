// A real redis-server on a free loopback port, in a temporary folder, stopped by its PID.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/wait.hpp"

namespace tollgate::testing {

// Binds 127.0.0.1:`port` (0: any) and returns the port bound, or 0 when it is taken.
inline int TryBind(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int bound = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    bound = ntohs(addr.sin_port);
  }
  ::close(fd);
  return bound;
}

// A port the kernel just handed out on 127.0.0.1 (free at the time of the call).
inline int FreePort() { return TryBind(0); }

// Cluster ports P whose bus ports P + 10000 are free too, none handed out twice by one picker.
// Both lie below the kernel's ephemeral range (32768 and up), so no client connection's source
// port (every redis-cli call takes one) can take them between the check and redis-server's bind.
class ClusterPorts {
 public:
  int Next() {
    for (int tries = 0; tries < 1000; ++tries, ++i_) {
      const int p =
          12000 +
          static_cast<int>((static_cast<unsigned>(::getpid()) * 7919u + i_ * 104729u) % 10768u);
      if (taken_.count(p) || taken_.count(p + 10000) || !TryBind(p) || !TryBind(p + 10000)) {
        continue;
      }
      taken_.insert({p, p + 10000});
      return p;
    }
    return 0;
  }

 private:
  std::set<int> taken_;
  unsigned i_ = 0;
};

inline int FreeClusterPort() {
  static ClusterPorts ports;
  return ports.Next();
}

// redis-cli against 127.0.0.1:`port`; its trimmed output.
inline std::string CliAt(int port, const std::string& command) {
  const std::string cmd =
      "redis-cli -h 127.0.0.1 -p " + std::to_string(port) + " " + command + " 2>/dev/null";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// Not thread-safe. The destructor kills the server by PID and removes its folder.
class RedisServer {
 public:
  // `port` 0: a free one (whose cluster bus port is free too with --cluster-enabled); when the
  // server cannot bind it (another process took it after the check), another one, five times.
  explicit RedisServer(std::vector<std::string> extra_args = {}, int port = 0)
      : extra_(std::move(extra_args)), port_(port) {
    char tmpl[] = "/tmp/tollgate-redis-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    if (port != 0) {
      Start();
      return;
    }
    bool cluster = false;
    for (const auto& a : extra_) cluster = cluster || a == "--cluster-enabled";
    for (int attempt = 1;; ++attempt) {
      port_ = cluster ? FreeClusterPort() : FreePort();
      try {
        Start();
        return;
      } catch (const std::runtime_error&) {
        if (attempt == 5) throw;
      }
    }
  }
  ~RedisServer() {
    Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  // Starts the server on port(); throws when it does not answer PING within five seconds or exits.
  void Start() {
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<std::string> args = {
          "redis-server", "--port",    std::to_string(port_), "--bind", "127.0.0.1",
          "--save",       "",          "--appendonly",        "no",     "--dir",
          dir_,           "--logfile", dir_ + "/redis.log"};
      args.insert(args.end(), extra_.begin(), extra_.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp("redis-server", argv.data());
      std::_Exit(127);
    }
    // Alive first: a PONG from another server on the port is not this one's.
    if (WaitUntil([&] { return Alive() && Cli("PING") == "PONG"; }, std::chrono::seconds(5),
                  std::chrono::milliseconds(25)) &&
        Alive()) {
      return;
    }
    Stop();
    throw std::runtime_error("redis-server did not start on port " + std::to_string(port_));
  }
  void Stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // Whether the server process has not exited (reaps it when it has).
  bool Alive() {
    if (pid_ <= 0) return false;
    if (::waitpid(pid_, nullptr, WNOHANG) == 0) return true;
    pid_ = -1;
    return false;
  }
  void Pause() { ::kill(pid_, SIGSTOP); }
  void Resume() { ::kill(pid_, SIGCONT); }

  // Runs redis-cli against this server and returns its trimmed output.
  std::string Cli(const std::string& command) const { return CliAt(port_, command); }

 private:
  std::vector<std::string> extra_;
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace tollgate::testing
