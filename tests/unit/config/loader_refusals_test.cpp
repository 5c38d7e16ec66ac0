// Issue 31: configuration that cannot mean what it says (a key given twice, `limits: []`,
// `method: post`, a port past 65535, a FIFO for a file, `${` where nothing expands it) is
// refused, naming the field's path and line; keys of unknown plans are warned about.
#include <tollgate/config/config.hpp>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <tollgate/util/digest.hpp>

namespace tollgate::config {
namespace {

const char* kOnePlan = "plans: {free: {limits: [{name: b, capacity: 5, refill_per_second: 1}]}}\n";
const char* kMinimal =
    "plans: {free: {limits: [{name: b, capacity: 5, refill_per_second: 1}]}}\n"
    "keys: [{key: k1, id: one, plan: free}]\n";

// A directory of files for one test, removed with it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tollgate-config-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  std::string Write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ + "/" + name) << text;
    return path_ + "/" + name;
  }
  std::string Fifo(const std::string& name) const {
    const std::string p = path_ + "/" + name;
    EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0);
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Issue 31: what cannot mean what it says is refused, naming the field's path and, in a file,
// its line.
TEST(Config, RefusesWhatCannotMeanWhatItSaysWithPathAndLine) {
  const std::string plan =  // lines 1 to 4
      "plans:\n  free:\n    limits:\n      - {name: b, capacity: 5, refill_per_second: 1}\n";
  const std::string twice = "given twice (first at line ";
  const std::string keep = "): YAML keeps one of them, so remove the other";
  const std::string port = "the port must be a number from 1 to 65535 (0: any free one), got '";
  const std::string env =
      "'${' is not expanded in this field (environment variables work in "
      "addresses, URLs, file paths and keys: docs/configuration.md, "
      "\"Environment variables\")";
  struct Case {
    const char* why;
    std::string yaml;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"a second global mode", "mode: enforce\n" + plan + "mode: shadow\n",
       "line 6: mode: " + twice + "1" + keep},
      {"a second plan mode",
       "plans:\n  free:\n    mode: enforce\n    limits: [{name: b, capacity: 5, "
       "refill_per_second: 1}]\n    mode: shadow\n",
       "line 5: plans.free.mode: " + twice + "3" + keep},
      {"a field twice in a flow mapping",
       "plans: {free: {limits: [{name: b, capacity: 5, capacity: 50, refill_per_second: 1}]}}\n",
       "line 1: plans.free.limits[0].capacity: " + twice + "1" + keep},
      {"a plan twice",
       plan + "  free:\n    limits: [{name: c, capacity: 1, refill_per_second: 1}]\n",
       "line 5: plans.free: " + twice + "2" + keep},
      {"a key's field twice",
       plan + "keys:\n  - key: k1\n    id: one\n    plan: free\n    id: two\n",
       "line 9: keys[0].id: " + twice + "7" + keep},
      {"a section twice", plan + "server: {threads: 1}\nserver: {threads: 2}\n",
       "line 6: server: " + twice + "5" + keep},
      {"limits: []", "plans:\n  free:\n    limits: []\n",
       "line 3: plans.free.limits: must hold 1 to 8 limits; for a plan without limits, write "
       "unlimited: true instead (a quota with neither allowance nor ceiling meters without "
       "limiting)"},
      {"unlimited with limits",
       "plans:\n  free:\n    unlimited: true\n    limits: [{name: b, capacity: 5, "
       "refill_per_second: 1}]\n",
       "line 4: plans.free.limits: an unlimited plan has no limits"},
      {"no limits at all", "plans:\n  free:\n    mode: shadow\n",
       "line 3: plans.free.limits: required (or unlimited: true)"},
      {"unlimited: yes", "plans:\n  free: {unlimited: yes}\n",
       "line 2: plans.free.unlimited: must be true or false, got 'yes'"},
      {"method: post", plan + "routes:\n  - {path: /login, method: post}\n",
       "line 6: routes[0].method: 'post' would never match: methods are upper-case and matched "
       "exactly (write POST)"},
      {"method: Get", plan + "routes:\n  - {path: /x, method: Get}\n",
       "line 6: routes[0].method: 'Get' would never match: methods are upper-case and matched "
       "exactly (write GET)"},
      {"a lower-case method in a list", plan + "routes:\n  - path: /x\n    method: [GET, delete]\n",
       "line 7: routes[0].method[1]: 'delete' would never match: methods are upper-case and "
       "matched exactly (write DELETE)"},
      {"port 99999", "server:\n  listen: 127.0.0.1:99999\n" + plan,
       "line 2: server.listen: " + port + "99999'"},
      {"port 65536", "server: {admin_listen: '[::1]:65536'}\n" + plan,
       "line 1: server.admin_listen: " + port + "65536'"},
      {"a negative port", plan + "decision: {listen: '127.0.0.1:-1'}\n",
       "line 5: decision.listen: " + port + "-1'"},
      {"a service name", plan + "rls:\n  listen: 127.0.0.1:http\n",
       "line 6: rls.listen: " + port + "http'"},
      {"a port of six digits", "server: {listen: ':000080'}\n" + plan,
       "line 1: server.listen: " + port + "000080'"},
      {"no port", "server: {listen: 127.0.0.1}\n" + plan,
       "line 1: server.listen: must be host:port, got '127.0.0.1'"},
      {"${ in a route path", plan + "routes:\n  - {path: '/v1/${TENANT}/*'}\n",
       "line 6: routes[0].path: " + env},
      {"${ in a key id", plan + "keys:\n  - {key: k, id: '${KEY_ID}', plan: free}\n",
       "line 6: keys[0].id: " + env},
      {"${ in a trusted proxy", "identity:\n  trusted_proxies: ['${LB}']\n" + plan,
       "line 2: identity.trusted_proxies[0]: " + env},
      {"an upstream port of 99999", "upstream: {url: 'http://127.0.0.1:99999/api'}\n" + plan,
       "line 1: upstream.url: the port must be a number from 1 to 65535, got '99999'"},
      {"an upstream port of 0", "upstream: {url: 'http://127.0.0.1:0'}\n" + plan,
       "line 1: upstream.url: the port must be a number from 1 to 65535, got '0'"},
      {"an empty upstream port", "upstream: {url: 'http://up:'}\n" + plan,
       "line 1: upstream.url: the port must be a number from 1 to 65535, got ''"},
      {"an admin token with a blank", "server: {admin_token: 'a b'}\n" + plan,
       "line 1: server.admin_token: must not hold blanks or control characters"},
      {"an admin host that is a pattern", "server: {admin_hosts: ['*']}\n" + plan,
       "line 1: server.admin_hosts[0]: must be a host name or address, got '*'"},
      {"an unset variable in a listen address",
       "server: {listen: '${TOLLGATE_NO_SUCH_VAR}'}\n" + plan,
       "line 1: server.listen: the environment variable TOLLGATE_NO_SUCH_VAR is not set"},
  };
  TempDir dir;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.why);
    auto loaded = LoadConfigFile(dir.Write("t.yaml", c.yaml));
    ASSERT_FALSE(loaded.ok()) << c.yaml;
    EXPECT_EQ(loaded.error(), c.error) << c.yaml;
    // The text API names the path alone: the same error without its line.
    auto parsed = ParseConfig(c.yaml, dir.path());
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.error(), c.error.substr(c.error.find(": ") + 2));
  }
}

// The TLS files (listeners, upstream, store), like keys_file, are relative to the config file's
// directory, whatever the working directory; absolute paths stay as they are.
TEST(Config, TlsFilesAreRelativeToTheConfigFile) {
  TempDir dir;
  for (const char* f : {"a.pem", "a.key", "ca.pem"}) dir.Write(f, "x");
  auto c = LoadConfigFile(dir.Write("t.yaml", std::string(kOnePlan) + R"(
server:
  tls: {certificates: [{cert_file: a.pem, key_file: a.key}]}
  admin_tls: {certificates: [{cert_file: /etc/a.pem, key_file: a.key}]}
upstream:
  url: https://api.internal
  tls: {ca_file: ca.pem, cert_file: a.pem, key_file: a.key}
store:
  type: redis
  url: rediss://redis.internal:6380
  tls: {ca_file: ca.pem}
)"));
  ASSERT_TRUE(c.ok()) << c.error();
  const std::string d = dir.path() + "/";
  EXPECT_EQ(c->server.tls.certificates[0].cert_file, d + "a.pem");
  EXPECT_EQ(c->server.tls.certificates[0].key_file, d + "a.key");
  EXPECT_EQ(c->server.admin_tls.certificates[0].cert_file, "/etc/a.pem");
  EXPECT_EQ(c->server.admin_tls.certificates[0].key_file, d + "a.key");
  EXPECT_EQ(c->upstream.tls.ca_file, d + "ca.pem");
  EXPECT_EQ(c->upstream.tls.cert_file, d + "a.pem");
  EXPECT_EQ(c->upstream.tls.key_file, d + "a.key");
  EXPECT_EQ(c->store.tls_ca_file, d + "ca.pem");
}

TEST(Config, EnvironmentVariablesInAddressesUrlsPathsAndKeys) {
  TempDir dir;
  const std::string keys =
      dir.Write("keys.yaml", "- {key: '${TOLLGATE_TEST_KEY}', id: one, plan: free}\n");
  ::setenv("TOLLGATE_TEST_LISTEN", "127.0.0.1:18080", 1);
  ::setenv("TOLLGATE_TEST_UPSTREAM", "http://127.0.0.1:18081", 1);
  ::setenv("TOLLGATE_TEST_DIR", dir.path().c_str(), 1);
  ::setenv("TOLLGATE_TEST_KEY", "sk-from-env", 1);
  auto c = LoadConfigFile(dir.Write("t.yaml", std::string(kOnePlan) + R"(
server: {listen: '${TOLLGATE_TEST_LISTEN}', admin_listen: '127.0.0.1:0'}
upstream: {url: '${TOLLGATE_TEST_UPSTREAM}/api'}
decision: {listen: '[::1]:8181'}
keys_file: ${TOLLGATE_TEST_DIR}/keys.yaml
)"));
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->server.listen, "127.0.0.1:18080");
  EXPECT_EQ(c->server.admin_listen, "127.0.0.1:0");
  EXPECT_EQ(c->upstream.url, "http://127.0.0.1:18081/api");
  EXPECT_EQ(c->decision.listen, "[::1]:8181");
  ASSERT_EQ(c->keys.size(), 1u);
  EXPECT_EQ(c->keys[0].sha256_hex, util::Sha256Hex("sk-from-env"));
  for (const char* v : {"TOLLGATE_TEST_LISTEN", "TOLLGATE_TEST_UPSTREAM", "TOLLGATE_TEST_DIR",
                        "TOLLGATE_TEST_KEY"}) {
    ::unsetenv(v);
  }
  (void)keys;
}

// Issue 31: `keys_file` naming a FIFO hung check-config (and a reload); every file the config
// reads must be a regular file, checked without blocking.
TEST(Config, FilesThatAreNotRegularFilesAreRefusedAtOnce) {
  TempDir dir;
  const std::string fifo = dir.Fifo("fifo");
  const std::string store = "store:\n  type: redis\n";
  struct Case {
    std::string yaml;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"keys_file: " + fifo + "\n", "line 2: keys_file: cannot read '" + fifo + "': is a FIFO"},
      {"keys_file: " + dir.path() + "\n",
       "line 2: keys_file: cannot read '" + dir.path() + "': is a directory"},
      {"keys_file: /dev/null\n", "line 2: keys_file: cannot read '/dev/null': is a device"},
      {"keys_file: /dev/zero\n", "line 2: keys_file: cannot read '/dev/zero': is a device"},
      {store + "  url: file:" + fifo + "\n",
       "line 4: store.url: cannot read the file of 'file:" + fifo + "': is a FIFO"},
      {store + "  url: rediss://h:1\n  tls: {ca_file: " + fifo + "}\n",
       "line 5: store.tls.ca_file: cannot read '" + fifo + "': is a FIFO"},
      {"keys: {source: postgres, url: 'file:/dev/stdin'}\n",
       "line 2: keys.url: cannot read the file of 'file:/dev/stdin': is a "
       "device"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.yaml);
    auto loaded = LoadConfigFile(dir.Write("t.yaml", std::string(kOnePlan) + c.yaml));
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.error(), c.error);
  }
  auto itself = LoadConfigFile(fifo);
  ASSERT_FALSE(itself.ok());
  EXPECT_EQ(itself.error(), "cannot read config file '" + fifo + "': is a FIFO");
}

TEST(Config, ErrorsInTheKeysFileNameItsLine) {
  TempDir dir;
  const std::string keys = dir.Write(
      "keys.yaml", "- {key: k1, id: one, plan: free}\n- {key: k2, id: one, plan: free}\n");
  auto c = LoadConfigFile(dir.Write("t.yaml", std::string(kOnePlan) + "keys_file: keys.yaml\n"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error(), "line 2: " + keys + "[1].id: duplicate 'one'");
  dir.Write("keys.yaml", "- key: k1\n  id: one\n  plan: free\n  plan: team\n");
  c = LoadConfigFile(dir.path() + "/t.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error(), "line 4: " + keys +
                           "[0].plan: given twice (first at line 3): YAML keeps "
                           "one of them, so remove the other");
}

// Issue 31: a key of a plan that does not exist is valid (the strictest plan), and said so.
TEST(Config, KeysOfUnknownPlansAreWarnedAbout) {
  auto c = ParseConfig(std::string(kOnePlan) + R"(
keys:
  - {key: k1, id: one, plan: free}
  - {key: k2, id: two, plan: pro}
  - {key: k3, id: three, plan: pro}
  - {key: k4, id: four, plan: Free}
  - {key: k5, id: five, plan: pro}
)");
  ASSERT_TRUE(c.ok()) << c.error();
  std::vector<std::string> ids;
  for (const KeyConfig* k : KeysOfUnknownPlans(*c)) ids.push_back(k->id);
  EXPECT_EQ(ids, (std::vector<std::string>{"two", "three", "four", "five"}));
  EXPECT_EQ(UnknownPlanWarnings(*c),
            (std::vector<std::string>{
                "key 'two' and 2 more name the plan 'pro', which does not exist: they get the "
                "strictest plan",
                "key 'four' names the plan 'Free', which does not exist: it gets the strictest "
                "plan"}));
  EXPECT_TRUE(UnknownPlanWarnings(*ParseConfig(kMinimal)).empty());
}

}  // namespace
}  // namespace tollgate::config
