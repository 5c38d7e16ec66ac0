// A Redis Sentinel deployment for tests: a master, a replica of it, and three redis-sentinel
// processes (quorum 2, down after 1 s, failover timeout 3 s) on free loopback ports, in
// temporary folders, stopped by PID.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/redis_server.hpp"
#include "support/wait.hpp"

namespace tollgate::testing {

// Not thread-safe. One redis-sentinel monitoring `master_name` at 127.0.0.1:`master_port`; the
// destructor kills it by PID and removes its folder.
class SentinelProcess {
 public:
  SentinelProcess(const std::string& master_name, int master_port) : port_(FreePort()) {
    char tmpl[] = "/tmp/tollgate-sentinel-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    const std::string conf = dir_ + "/sentinel.conf";  // a sentinel rewrites its config file
    std::ofstream(conf) << "port " << port_ << "\nbind 127.0.0.1\ndir " << dir_ << "\nlogfile "
                        << dir_ << "/sentinel.log\nsentinel monitor " << master_name
                        << " 127.0.0.1 " << master_port << " 2\nsentinel down-after-milliseconds "
                        << master_name << " 1000\nsentinel failover-timeout " << master_name
                        << " 3000\n";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execlp("redis-sentinel", "redis-sentinel", conf.c_str(), static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    if (!WaitUntil([&] { return Cli("PING") == "PONG"; }, std::chrono::seconds(5),
                   std::chrono::milliseconds(25))) {
      Stop();
      throw std::runtime_error("redis-sentinel did not start on port " + std::to_string(port_));
    }
  }
  ~SentinelProcess() {
    Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  SentinelProcess(const SentinelProcess&) = delete;
  SentinelProcess& operator=(const SentinelProcess&) = delete;

  int port() const { return port_; }
  std::string Cli(const std::string& command) const { return CliAt(port_, command); }
  // The port of the master this sentinel names for `name` ("" when it names none).
  std::string MasterPort(const std::string& name) const {
    const std::string out = Cli("SENTINEL GET-MASTER-ADDR-BY-NAME " + name);
    const size_t nl = out.rfind('\n');
    return nl == std::string::npos ? "" : out.substr(nl + 1);
  }
  // A field of SENTINEL MASTER `name` (e.g. "num-other-sentinels"); "" when absent.
  std::string MasterField(const std::string& name, const std::string& field) const {
    const std::string out = "\n" + Cli("SENTINEL MASTER " + name) + "\n";
    const size_t at = out.find("\n" + field + "\n");
    if (at == std::string::npos) return "";
    const size_t begin = at + field.size() + 2;
    return out.substr(begin, out.find('\n', begin) - begin);
  }

 private:
  void Stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  int port_;
  std::string dir_;
  pid_t pid_ = -1;
};

// Not thread-safe. The master, its replica and three sentinels, ready for a failover: every
// sentinel knows the replica and the two other sentinels, and the replica is in sync.
class SentinelDeployment {
 public:
  static constexpr const char* kName = "mymaster";

  SentinelDeployment()
      : master_(std::make_unique<RedisServer>()),
        replica_(std::make_unique<RedisServer>(std::vector<std::string>{
            "--replicaof", "127.0.0.1", std::to_string(master_->port())})) {
    for (int i = 0; i < 3; ++i)
      sentinels_.push_back(std::make_unique<SentinelProcess>(kName, master_->port()));
    const bool ready = WaitUntil(
        [&] {
          if (replica_->Cli("INFO replication").find("master_link_status:up") == std::string::npos)
            return false;
          for (const auto& s : sentinels_) {
            if (s->MasterField(kName, "num-other-sentinels") != "2" ||
                s->MasterField(kName, "num-slaves") != "1")
              return false;
          }
          return true;
        },
        std::chrono::seconds(20), std::chrono::milliseconds(100));
    if (!ready) throw std::runtime_error("the sentinels did not discover each other");
  }

  // redis-sentinel://mymaster@<the three sentinels>.
  std::string Url() const {
    std::string url = std::string("redis-sentinel://") + kName + "@";
    for (size_t i = 0; i < sentinels_.size(); ++i)
      url += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(sentinels_[i]->port());
    return url;
  }
  RedisServer& master() { return *master_; }
  RedisServer& replica() { return *replica_; }
  SentinelProcess& sentinel(size_t i) { return *sentinels_.at(i); }

  // Waits (bounded) until every sentinel names the node on `port` as the master.
  bool WaitMasterIs(int port, std::chrono::milliseconds timeout) {
    return WaitUntil(
        [&] {
          for (const auto& s : sentinels_) {
            if (s->MasterPort(kName) != std::to_string(port)) return false;
          }
          return true;
        },
        timeout, std::chrono::milliseconds(50));
  }

 private:
  std::unique_ptr<RedisServer> master_;
  std::unique_ptr<RedisServer> replica_;
  std::vector<std::unique_ptr<SentinelProcess>> sentinels_;
};

}  // namespace tollgate::testing
