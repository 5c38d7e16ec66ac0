// A real PostgreSQL 15 server on a free loopback port, in a temporary folder owned by the
// postgres user: initdb and the server run as that user (the tests run as root), and the
// server is stopped by its PID.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_server.hpp"  // FreePort

namespace tollgate::testing {

inline constexpr const char* kPostgresBin = "/usr/lib/postgresql/15/bin";

// Why PostgresServer cannot run here, or empty when it can.
inline std::string PostgresUnavailable() {
  if (::geteuid() != 0) return "needs root (initdb and postgres run as the postgres user)";
  if (!::getpwnam("postgres")) return "no postgres user";
  if (::access((std::string(kPostgresBin) + "/postgres").c_str(), X_OK) != 0) {
    return std::string("no ") + kPostgresBin + "/postgres";
  }
  return "";
}

// Not thread-safe. The destructor stops the server by PID and removes its folder.
class PostgresServer {
 public:
  PostgresServer() {
    const passwd* pw = ::getpwnam("postgres");
    if (!pw) throw std::runtime_error("no postgres user");
    uid_ = pw->pw_uid;
    gid_ = pw->pw_gid;
    char tmpl[] = "/tmp/tollgate-pg-XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    if (::chown(dir_.c_str(), uid_, gid_) != 0)
      throw std::runtime_error("chown " + dir_ + " failed");
    const pid_t pid = Spawn({std::string(kPostgresBin) + "/initdb", "-D", dir_ + "/data", "-A",
                             "trust", "-U", "postgres", "-N", "-E", "UTF8", "--no-instructions"},
                            dir_ + "/initdb.log");
    if (WaitExit(pid, std::chrono::seconds(60)) != 0) {
      throw std::runtime_error("initdb failed: " + ReadAll(dir_ + "/initdb.log"));
    }
    Start();
  }
  ~PostgresServer() {
    Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  std::string Url(const std::string& db = "postgres", int port = 0) const {
    return "postgres://postgres@127.0.0.1:" + std::to_string(port ? port : port_) + "/" + db;
  }

  // Starts the server on `port` (0: its own port, chosen at the first start) and waits until
  // it answers.
  void Start(int port = 0) {
    if (pid_ > 0) return;
    if (port_ == 0) port_ = FreePort();
    running_port_ = port ? port : port_;
    pid_ = Spawn({std::string(kPostgresBin) + "/postgres", "-D", dir_ + "/data", "-p",
                  std::to_string(running_port_), "-k", dir_, "-c", "listen_addresses=127.0.0.1",
                  "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=30", "-c",
                  "shared_buffers=16MB"},
                 dir_ + "/postgres.log", /*die_with_parent=*/true);
    // fsync=off: the OS keeps what a killed server wrote (these tests never crash the OS).
    // synchronous_commit stays on: Stop() is an immediate shutdown, which would lose commits
    // still in the server's WAL buffers.
    const std::string url = Url("postgres", running_port_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if (PQping(url.c_str()) == PQPING_OK) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("postgres exited: " + ReadAll(dir_ + "/postgres.log"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("postgres did not answer on port " + std::to_string(running_port_));
  }

  // Immediate shutdown (SIGQUIT): the server and its backends go at once, as in a crash; the
  // next start recovers from the WAL. SIGKILL if it has not exited within 10 s.
  void Stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGQUIT);
    if (WaitExit(pid_, std::chrono::seconds(10)) == -2) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }

  // Runs `sql` (one or more statements) on database `db`; throws with the server's message.
  void Exec(const std::string& sql, const std::string& db = "postgres") const {
    PGconn* c = PQconnectdb(Url(db, running_port_).c_str());
    PQsetNoticeProcessor(
        c, [](void*, const char*) {}, nullptr);  // "already exists, skipping"
    if (PQstatus(c) != CONNECTION_OK) {
      const std::string e = PQerrorMessage(c);
      PQfinish(c);
      throw std::runtime_error("connect: " + e);
    }
    PGresult* r = PQexec(c, sql.c_str());
    const ExecStatusType st = PQresultStatus(r);
    const std::string e = PQresultErrorMessage(r);
    PQclear(r);
    PQfinish(c);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) throw std::runtime_error(sql + ": " + e);
  }

  // The first column of the first row of `sql` ("" when none).
  std::string Query(const std::string& sql, const std::string& db = "postgres") const {
    PGconn* c = PQconnectdb(Url(db, running_port_).c_str());
    PGresult* r = PQexec(c, sql.c_str());
    std::string out;
    const bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
    const std::string e = ok ? "" : std::string(PQresultErrorMessage(r)) + PQerrorMessage(c);
    if (ok && PQntuples(r) > 0) out = PQgetvalue(r, 0, 0);
    PQclear(r);
    PQfinish(c);
    if (!ok) throw std::runtime_error(sql + ": " + e);
    return out;
  }

  // A new, empty database; its name.
  std::string NewDatabase() {
    const std::string name = "t" + std::to_string(++databases_);
    Exec("CREATE DATABASE " + name);
    return name;
  }

  static std::string ReadAll(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  // Forks and execs `args` as the postgres user, output to `log`.
  pid_t Spawn(std::vector<std::string> args, const std::string& log,
              bool die_with_parent = false) const {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid > 0) return pid;
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      [[maybe_unused]] int ignored = ::fchown(fd, uid_, gid_);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    ::setsid();  // a ^C in the terminal reaches the test, which stops the server itself
    if (::setgroups(0, nullptr) != 0 || ::setgid(gid_) != 0 || ::setuid(uid_) != 0) std::_Exit(126);
    // After setuid, which clears it: a test that dies does not leave a server behind.
    if (die_with_parent) ::prctl(PR_SET_PDEATHSIG, SIGQUIT);
    ::setenv("HOME", dir_.c_str(), 1);
    ::unsetenv("PGDATA");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    std::_Exit(127);
  }

  // The exit status of `pid`, -1 when it did not exit normally, -2 after `timeout`.
  static int WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      const pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      if (r < 0) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return -2;
  }

  uid_t uid_ = 0;
  gid_t gid_ = 0;
  std::string dir_;
  int port_ = 0;          // the server's own port
  int running_port_ = 0;  // where it listens now
  pid_t pid_ = -1;
  int databases_ = 0;
};

}  // namespace tollgate::testing
