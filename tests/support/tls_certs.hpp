// Throwaway TLS certificates for tests, made with the openssl command line tool: a CA, a server
// certificate for 127.0.0.1 only, a client certificate, and a second CA that signed neither.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tollgate::testing {

class TlsCerts {
 public:
  TlsCerts() {
    char tmpl[] = "/tmp/tollgate-tls-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    const std::string d = dir_ + "/";
    Run("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=tollgate-test-ca -keyout " +
        d + "ca.key -out " + d + "ca.crt");
    Run("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=other-ca -keyout " + d +
        "other.key -out " + d + "other.crt");
    Sign("server", "subjectAltName=IP:127.0.0.1");
    Sign("client", "extendedKeyUsage=clientAuth");
  }
  ~TlsCerts() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TlsCerts(const TlsCerts&) = delete;
  TlsCerts& operator=(const TlsCerts&) = delete;

  std::string File(const std::string& name) const { return dir_ + "/" + name; }

  // <name>.crt and <name>.key: a leaf signed by the CA with the extension `extension` (e.g.
  // "subjectAltName=DNS:api.example.com,DNS:*.example.com"), an RSA key or, with `ec`, a P-256
  // one; its subject CN is `name`.
  void Leaf(const std::string& name, const std::string& extension, bool ec = false) {
    Sign(name, extension, ec ? "ec -pkeyopt ec_paramgen_curve:prime256v1" : "rsa:2048");
  }

  // redis-server arguments: TLS on `port` with the server certificate; client certificates
  // signed by the CA required when `clients` is set.
  std::vector<std::string> RedisArgs(int port, bool clients) const {
    return {"--tls-port",         std::to_string(port),  "--tls-cert-file",    File("server.crt"),
            "--tls-key-file",     File("server.key"),    "--tls-ca-cert-file", File("ca.crt"),
            "--tls-auth-clients", clients ? "yes" : "no"};
  }

 private:
  static void Run(const std::string& cmd) {
    if (std::system((cmd + " >/dev/null 2>&1").c_str()) != 0)
      throw std::runtime_error("failed: " + cmd);
  }
  void Sign(const std::string& name, const std::string& extension,
            const std::string& key = "rsa:2048") {
    const std::string d = dir_ + "/";
    Run("openssl req -newkey " + key + " -nodes -subj /CN=" + name + " -keyout " + d + name +
        ".key -out " + d + name + ".csr");
    std::ofstream(d + name + ".ext") << extension << "\n";
    Run("openssl x509 -req -days 2 -in " + d + name + ".csr -CA " + d + "ca.crt -CAkey " + d +
        "ca.key -CAcreateserial -extfile " + d + name + ".ext -out " + d + name + ".crt");
  }

  std::string dir_;
};

}  // namespace tollgate::testing
