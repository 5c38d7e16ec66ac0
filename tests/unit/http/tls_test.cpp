// The TLS room (src/http/tls/): certificates loaded and refused, SNI selection, and handshakes
// between a real OpenSSL client and the server context over memory BIOs (issue 33).
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "http/tls/certificate.hpp"
#include "http/tls/certificate_set.hpp"
#include "http/tls/server_context.hpp"
#include "support/tls_certs.hpp"

namespace tollgate::http::tls {
namespace {

int64_t Now() { return static_cast<int64_t>(::time(nullptr)); }

// One set of test certificates for the whole suite (made with the openssl tool).
class Tls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new testing::TlsCerts();
    certs_->Leaf("api", "subjectAltName=DNS:api.example.com,DNS:API2.example.com");
    certs_->Leaf("wild", "subjectAltName=DNS:*.example.com", /*ec=*/true);
    certs_->Leaf("other", "subjectAltName=DNS:other.test");
    certs_->Leaf("cnonly", "basicConstraints=CA:FALSE");
  }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }
  static std::string File(const std::string& name) { return certs_->File(name); }
  static ServerOptions::Files Pair(const std::string& name) {
    return {File(name + ".crt"), File(name + ".key")};
  }
  static testing::TlsCerts* certs_;
};
testing::TlsCerts* Tls::certs_ = nullptr;

// A handshake over memory: what the client saw.
struct Seen {
  bool ok = false;
  std::string subject_cn;  // of the certificate served
  std::string alpn;
  int version = 0;
  bool resumed = false;
  SSL_SESSION* session = nullptr;  // the client's, to resume with (owned by the caller)
};

struct Handshake {
  std::string sni;
  int max_version = TLS1_3_VERSION;
  int min_version = TLS1_VERSION;
  std::vector<std::string> alpn;
  SSL_SESSION* resume = nullptr;
};

Seen Connect(const ServerContext& server, const Handshake& h) {
  SSL_CTX* cctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_security_level(cctx, 0);  // lets the client offer TLS 1.0 and 1.1
  SSL_CTX_set_min_proto_version(cctx, h.min_version);
  SSL_CTX_set_max_proto_version(cctx, h.max_version);
  SSL* c = SSL_new(cctx);
  SSL* s = SSL_new(server.native());
  BIO *c_bio, *s_bio;
  BIO_new_bio_pair(&c_bio, 0, &s_bio, 0);
  SSL_set_bio(c, c_bio, c_bio);
  SSL_set_bio(s, s_bio, s_bio);
  SSL_set_connect_state(c);
  SSL_set_accept_state(s);
  if (!h.sni.empty()) SSL_set_tlsext_host_name(c, h.sni.c_str());
  if (!h.alpn.empty()) {
    std::string wire;
    for (const auto& p : h.alpn) wire += static_cast<char>(p.size()) + p;
    SSL_set_alpn_protos(c, reinterpret_cast<const unsigned char*>(wire.data()),
                        static_cast<unsigned>(wire.size()));
  }
  if (h.resume) SSL_set_session(c, h.resume);
  Seen seen;
  for (int i = 0; i < 20; ++i) {
    const int rc = SSL_do_handshake(c);
    const int rs = SSL_do_handshake(s);
    if (rc == 1 && rs == 1) {
      seen.ok = true;
      break;
    }
    const int ec = SSL_get_error(c, rc), es = SSL_get_error(s, rs);
    if ((rc != 1 && ec != SSL_ERROR_WANT_READ) || (rs != 1 && es != SSL_ERROR_WANT_READ)) break;
  }
  ERR_clear_error();
  if (seen.ok) {
    // TLS 1.3 tickets arrive after the handshake: read them (there is no data: WANT_READ).
    char buf[1];
    SSL_read(c, buf, 1);
    if (X509* peer = SSL_get1_peer_certificate(c)) {
      char cn[256] = {};
      X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn, sizeof cn);
      seen.subject_cn = cn;
      X509_free(peer);
    }
    const unsigned char* proto = nullptr;
    unsigned len = 0;
    SSL_get0_alpn_selected(c, &proto, &len);
    seen.alpn.assign(reinterpret_cast<const char*>(proto), len);
    seen.version = SSL_version(c);
    seen.resumed = SSL_session_reused(c) == 1;
    seen.session = SSL_get1_session(c);
  }
  // A session of a connection not shut down cleanly is not resumed.
  if (seen.ok) {
    SSL_shutdown(c);
    SSL_shutdown(s);
    SSL_shutdown(c);
  }
  ERR_clear_error();
  SSL_free(c);
  SSL_free(s);
  SSL_CTX_free(cctx);
  return seen;
}

std::unique_ptr<ServerContext> Make(ServerOptions o) {
  auto r = ServerContext::Create(std::move(o), Now());
  EXPECT_TRUE(r.ok()) << r.error();
  return r.ok() ? std::move(r).value() : nullptr;
}

TEST_F(Tls, LoadsChainsNamesExpiryAndKeyTypes) {
  auto api = Certificate::Load(File("api.crt"), File("api.key"), Now());
  ASSERT_TRUE(api.ok()) << api.error();
  EXPECT_EQ(api->names(), (std::vector<std::string>{"api.example.com", "api2.example.com"}));
  EXPECT_EQ(api->algorithm(), "RSA");
  EXPECT_GT(api->not_after_unix(), Now());
  auto wild = Certificate::Load(File("wild.crt"), File("wild.key"), Now());
  ASSERT_TRUE(wild.ok()) << wild.error();
  EXPECT_EQ(wild->algorithm(), "ECDSA");
  EXPECT_EQ(wild->names(), std::vector<std::string>{"*.example.com"});
  auto cn = Certificate::Load(File("cnonly.crt"), File("cnonly.key"), Now());
  ASSERT_TRUE(cn.ok()) << cn.error();
  EXPECT_EQ(cn->names(), std::vector<std::string>{"cnonly"});  // no SAN: the CN
}

TEST_F(Tls, RefusesWhatCannotBeServed) {
  std::ofstream(File("garbage.pem")) << "not a certificate\n";
  const struct {
    std::string cert, key;
    int64_t now;
    const char* says;
  } cases[] = {
      {File("missing.crt"), File("api.key"), Now(), "cannot be read"},
      {File("api.crt"), File("missing.key"), Now(), "cannot be read"},
      {File("garbage.pem"), File("api.key"), Now(), "no PEM certificate"},
      {File("api.crt"), File("garbage.pem"), Now(), "no unencrypted PEM private key"},
      {File("api.crt"), File("other.key"), Now(), "does not match"},
      {File("api.crt"), File("api.key"), Now() + 10 * 86400, "expired"},
      {File("api.crt"), File("api.key"), Now() - 86400, "not valid yet"},
  };
  for (const auto& c : cases) {
    auto r = Certificate::Load(c.cert, c.key, c.now);
    ASSERT_FALSE(r.ok()) << c.says;
    EXPECT_NE(r.error().find(c.says), std::string::npos) << r.error();
  }
  EXPECT_FALSE(ServerContext::Create({}, Now()).ok());  // no certificate
  EXPECT_FALSE(
      ServerContext::Create({.certificates = {Pair("api")}, .ciphers = "NOPE"}, Now()).ok());
  EXPECT_FALSE(
      ServerContext::Create({.certificates = {Pair("api")}, .min_version = TLS1_1_VERSION}, Now())
          .ok());
}

TEST(TlsNames, WildcardsCoverOneLeftMostLabel) {
  EXPECT_TRUE(NameMatches("api.example.com", "api.example.com"));
  EXPECT_TRUE(NameMatches("*.example.com", "a.example.com"));
  EXPECT_FALSE(NameMatches("*.example.com", "example.com"));
  EXPECT_FALSE(NameMatches("*.example.com", "a.b.example.com"));
  EXPECT_FALSE(NameMatches("*.example.com", ".example.com"));
  EXPECT_FALSE(NameMatches("*.example.com", "aexample.com"));
  EXPECT_FALSE(NameMatches("api.example.com", "xapi.example.com"));
}

TEST_F(Tls, SniChoosesExactThenWildcardThenTheDefault) {
  auto server = Make({.certificates = {Pair("other"), Pair("wild"), Pair("api")}});
  ASSERT_TRUE(server);
  const struct {
    std::string sni, cn;
  } cases[] = {
      {"api.example.com", "api"},   // exact beats the wildcard listed before it
      {"API.Example.COM", "api"},   // any case
      {"api.example.com.", "api"},  // fully qualified
      {"api2.example.com", "api"},
      {"www.example.com", "wild"},
      {"a.b.example.com", "other"},  // no wildcard for two labels: the default
      {"other.test", "other"},
      {"unknown.test", "other"},
      {"", "other"},  // no SNI
      // Hostile names: none reaches a certificate it does not cover.
      {"example.com", "other"},                // the wildcard's parent
      {".example.com", "other"},               // an empty left-most label
      {"api.example.com.evil.test", "other"},  // a covered name as a prefix
      {"evilapi.example.com", "wild"},         // one label: the wildcard, never api's
      {"*.example.com", "wild"},               // the pattern as a name: the wildcard's own
      {std::string(253, 'a'), "other"},        // as long as a name may be
  };
  for (const auto& c : cases) {
    const Seen seen = Connect(*server, {.sni = c.sni});
    EXPECT_TRUE(seen.ok) << c.sni;
    EXPECT_EQ(seen.subject_cn, c.cn) << c.sni;
    SSL_SESSION_free(seen.session);
  }
}

TEST_F(Tls, UnknownNamesCanBeRefused) {
  auto server = Make({.certificates = {Pair("api")}, .refuse_unknown_names = true});
  ASSERT_TRUE(server);
  EXPECT_FALSE(Connect(*server, {.sni = "unknown.test"}).ok);
  EXPECT_EQ(server->stats().unknown_names.load(), 1u);
  const Seen no_sni = Connect(*server, {});
  EXPECT_TRUE(no_sni.ok);  // a client without SNI gets the default
  SSL_SESSION_free(no_sni.session);
}

TEST_F(Tls, OnlyTls12And13WithAlpnHttp11) {
  auto server = Make({.certificates = {Pair("api")}});
  ASSERT_TRUE(server);
  for (int old : {TLS1_VERSION, TLS1_1_VERSION}) {
    EXPECT_FALSE(Connect(*server, {.max_version = old}).ok) << old;
  }
  const Seen v12 = Connect(*server, {.max_version = TLS1_2_VERSION, .alpn = {"h2", "http/1.1"}});
  EXPECT_TRUE(v12.ok);
  EXPECT_EQ(v12.version, TLS1_2_VERSION);
  EXPECT_EQ(v12.alpn, "http/1.1");
  const Seen v13 = Connect(*server, {.alpn = {"http/1.1"}});
  EXPECT_EQ(v13.version, TLS1_3_VERSION);
  EXPECT_EQ(v13.alpn, "http/1.1");
  const Seen h2_only = Connect(*server, {.alpn = {"h2"}});
  EXPECT_TRUE(h2_only.ok);  // nothing in common: no ALPN, HTTP/1.1
  EXPECT_EQ(h2_only.alpn, "");
  auto only13 = Make({.certificates = {Pair("api")}, .min_version = TLS1_3_VERSION});
  EXPECT_FALSE(Connect(*only13, {.max_version = TLS1_2_VERSION}).ok);
  for (const Seen* s : {&v12, &v13, &h2_only}) SSL_SESSION_free(s->session);
}

TEST_F(Tls, SessionsResumeAcrossAReload) {
  auto server = Make({.certificates = {Pair("api")}});
  ASSERT_TRUE(server);
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    const Seen first = Connect(*server, {.sni = "api.example.com", .max_version = version});
    ASSERT_TRUE(first.ok);
    EXPECT_FALSE(first.resumed);
    ASSERT_FALSE(server->Reload(Now()).has_value());
    const Seen again = Connect(
        *server, {.sni = "api.example.com", .max_version = version, .resume = first.session});
    EXPECT_TRUE(again.resumed) << version;
    SSL_SESSION_free(first.session);
    SSL_SESSION_free(again.session);
  }
  auto no_tickets = Make({.certificates = {Pair("api")}, .session_tickets = false});
  const Seen first = Connect(*no_tickets, {.max_version = TLS1_2_VERSION});
  const Seen again = Connect(*no_tickets, {.max_version = TLS1_2_VERSION, .resume = first.session});
  EXPECT_TRUE(again.resumed);  // the server's session cache
  SSL_SESSION_free(first.session);
  SSL_SESSION_free(again.session);
}

// Files swapped under the paths (a symlink moved, as Kubernetes does): FilesChanged sees it once
// they have settled,
// Reload serves the new certificate to new handshakes, and a bad new one is refused while the
// one before keeps serving.
TEST_F(Tls, ReloadSwapsInNewFilesAndRefusesBadOnes) {
  const std::string dir = File("live");
  std::filesystem::create_directories(dir);
  auto link = [&](const std::string& name) {
    for (const char* ext : {".crt", ".key"}) {
      const std::string tmp = dir + "/tmp" + ext;
      std::filesystem::remove(tmp);
      std::filesystem::create_symlink(File(name + ext), tmp);
      std::filesystem::rename(tmp, dir + "/served" + ext);
    }
  };
  link("api");
  auto server = Make({.certificates = {{dir + "/served.crt", dir + "/served.key"}}});
  ASSERT_TRUE(server);
  EXPECT_FALSE(server->FilesChanged());
  EXPECT_EQ(Connect(*server, {}).subject_cn, "api");
  link("other");
  // A change is taken once a second check finds the files as the first did (a certificate and
  // its key written one after the other are loaded together).
  EXPECT_FALSE(server->FilesChanged());
  EXPECT_TRUE(server->FilesChanged());
  ASSERT_FALSE(server->Reload(Now()).has_value());
  EXPECT_FALSE(server->FilesChanged());
  EXPECT_EQ(Connect(*server, {}).subject_cn, "other");
  EXPECT_EQ(server->stats().reloads_ok.load(), 1u);
  // A key that does not match: refused, counted, the certificate before keeps serving.
  std::filesystem::remove(dir + "/served.key");
  std::filesystem::create_symlink(File("api.key"), dir + "/served.key");
  EXPECT_FALSE(server->FilesChanged());
  EXPECT_TRUE(server->FilesChanged());
  auto error = server->Reload(Now());
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->message.find("does not match"), std::string::npos) << error->message;
  EXPECT_EQ(server->stats().reloads_error.load(), 1u);
  EXPECT_FALSE(server->FilesChanged());  // not tried again until they change again
  EXPECT_EQ(Connect(*server, {}).subject_cn, "other");
  // Expired by the time of the reload: refused too.
  link("api");
  EXPECT_TRUE(server->Reload(Now() + 30 * 86400).has_value());
  EXPECT_EQ(Connect(*server, {}).subject_cn, "other");
  EXPECT_GT(server->FirstExpiryUnix(), Now());
}

}  // namespace
}  // namespace tollgate::http::tls
