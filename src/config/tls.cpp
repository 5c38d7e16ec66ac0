#include "config/tls.hpp"

#include "config/files.hpp"
#include "config/yaml.hpp"

namespace tollgate::config::internal {

namespace {

TlsConfig::Certificate ParseCertificate(const YAML::Node& n, const std::string& path,
                                        const std::string& base_dir) {
  RequireMap(n, path);
  OnlyKeys(n, path, {"cert_file", "key_file"});
  TlsConfig::Certificate c;
  for (auto [key, out] : {std::pair{"cert_file", &c.cert_file}, {"key_file", &c.key_file}}) {
    if (!n[key]) Fail(Join(path, key), "required");
    *out = Expanded(n[key], Join(path, key));
    if (out->empty()) Fail(Join(path, key), "must not be empty");
    *out = FromConfigDir(base_dir, *out);
  }
  return c;
}

// `client_certificates: {mode: optional|required, ca_file: F}`.
void ParseClientCertificates(const YAML::Node& n, const std::string& path,
                             const std::string& base_dir, TlsConfig& t) {
  RequireMap(n, path);
  OnlyKeys(n, path, {"mode", "ca_file"});
  using Auth = TlsConfig::ClientAuth;
  if (!n["mode"]) Fail(Join(path, "mode"), "required: optional or required");
  t.client_auth = ParseEnum<Auth>(
      n["mode"], Join(path, "mode"),
      {{"off", Auth::kOff}, {"optional", Auth::kOptional}, {"required", Auth::kRequired}},
      "off, optional or required");
  if (n["ca_file"])
    t.client_ca_file = FromConfigDir(base_dir, Expanded(n["ca_file"], Join(path, "ca_file")));
  if (t.client_auth != Auth::kOff && t.client_ca_file.empty())
    Fail(Join(path, "ca_file"), "required: the CAs client certificates must chain to");
}

}  // namespace

TlsConfig ParseTls(const YAML::Node& n, const std::string& path, const std::string& base_dir) {
  RequireMap(n, path);
  OnlyKeys(n, path,
           {"certificates", "min_version", "ciphers", "ciphersuites", "unknown_names",
            "session_tickets", "client_certificates", "handshake_timeout_ms", "reload_check_ms"});
  TlsConfig t;
  const YAML::Node certs = n["certificates"];
  const std::string certs_path = Join(path, "certificates");
  if (!certs) Fail(certs_path, "required: at least one certificate");
  if (!certs.IsSequence() || certs.size() == 0)
    Fail(certs_path, "must be a list of at least one {cert_file, key_file}");
  for (size_t i = 0; i < certs.size(); ++i)
    t.certificates.push_back(ParseCertificate(certs[i], Index(certs_path, i), base_dir));
  if (n["min_version"]) {
    t.min_version = ParseEnum<int>(n["min_version"], Join(path, "min_version"),
                                   {{"1.2", 12}, {"1.3", 13}}, "\"1.2\" or \"1.3\"");
  }
  if (n["ciphers"]) t.ciphers = Str(n["ciphers"], Join(path, "ciphers"));
  if (n["ciphersuites"]) t.ciphersuites = Str(n["ciphersuites"], Join(path, "ciphersuites"));
  if (n["unknown_names"]) {
    t.refuse_unknown_names =
        ParseEnum<bool>(n["unknown_names"], Join(path, "unknown_names"),
                        {{"default", false}, {"refuse", true}}, "default or refuse");
  }
  if (n["session_tickets"])
    t.session_tickets = Bool(n["session_tickets"], Join(path, "session_tickets"));
  if (n["client_certificates"])
    ParseClientCertificates(n["client_certificates"], Join(path, "client_certificates"), base_dir,
                            t);
  Set(n, "handshake_timeout_ms", path, t.handshake_timeout_ms, 1, 600'000);
  Set(n, "reload_check_ms", path, t.reload_check_ms, 100, 3'600'000);
  return t;
}

void ReadPemFiles(const YAML::Node& t, const std::string& section, const std::string& base_dir,
                  PemFiles files) {
  for (auto [name, out] : {std::pair{"ca_file", files.ca_file},
                           {"cert_file", files.cert_file},
                           {"key_file", files.key_file}}) {
    if (!t[name]) continue;
    const std::string field = Join(section, name);
    *out = FromConfigDir(base_dir, Expanded(t[name], field));
    auto content = ReadRegularFile(*out);
    if (!content) Fail(field, "cannot read '" + *out + "': " + content.error());
  }
  if (files.cert_file->empty() != files.key_file->empty())
    Fail(section, "cert_file and key_file go together");
}

}  // namespace tollgate::config::internal
