#include <gtest/gtest.h>

#include <string>
#include <tollgate/util/target.hpp>
#include <vector>

namespace tollgate::util {
namespace {

constexpr TargetOptions kDefault{};
constexpr TargetOptions kEncodedSlash{.allow_encoded_slash = true};
constexpr TargetOptions kParameters{.allow_path_parameters = true};
constexpr TargetOptions kBoth{.allow_encoded_slash = true, .allow_path_parameters = true};

// The error details, as the gateway logs them.
constexpr const char* kEmpty = "empty request target";
constexpr const char* kConnect = "CONNECT (authority-form) is not supported";
constexpr const char* kAsterisk = "'*' is only for OPTIONS";
constexpr const char* kNotOriginForm = "not origin-form, absolute-form or '*'";
constexpr const char* kScheme = "scheme is not http or https";
constexpr const char* kUserinfo = "userinfo in the authority";
constexpr const char* kAuthority = "invalid authority";
constexpr const char* kEmptyHost = "empty host";
constexpr const char* kEncodedHost = "percent-encoding in the host";
constexpr const char* kPort = "invalid port";
constexpr const char* kFragment = "fragment ('#')";
constexpr const char* kBackslash = "backslash";
constexpr const char* kControl = "space, control or non-ASCII byte";
constexpr const char* kMalformed = "'%' not followed by two hex digits";
constexpr const char* kEncodedControl = "encoded control byte";
constexpr const char* kEncodedSlashError = "encoded '/' or '\\' in the path";
constexpr const char* kParametersError = "';' in the path";
constexpr const char* kHiddenDots = "dot segment behind ';', %3B, %2F or %5C";

struct Case {
  std::string raw;
  std::string target;           // canonical origin-form, when ok
  const char* error = nullptr;  // else the error
  TargetOptions options = kDefault;
  std::string authority = {};
  std::string method = "GET";
};

Case Ok(std::string raw, std::string target, TargetOptions options = kDefault) {
  return {std::move(raw), std::move(target), nullptr, options};
}
Case Bad(std::string raw, const char* error, TargetOptions options = kDefault) {
  return {std::move(raw), {}, error, options};
}
Case Absolute(std::string raw, std::string target, std::string authority) {
  return {std::move(raw), std::move(target), nullptr, kDefault, std::move(authority)};
}

// Runs `c` through CanonicalizeTarget and checks the answer, its parts, and that the answer is
// its own canonical form (through the fast path when it can be).
void Check(const Case& c) {
  SCOPED_TRACE("raw: " + c.raw);
  std::string buffer;
  CanonicalTarget out;
  const char* error = CanonicalizeTarget(c.method, c.raw, c.options, buffer, out);
  if (c.error) {
    ASSERT_NE(error, nullptr) << "accepted as " << out.target;
    EXPECT_STREQ(error, c.error);
    return;
  }
  ASSERT_EQ(error, nullptr) << error;
  EXPECT_EQ(out.target, c.target);
  EXPECT_EQ(out.authority, c.authority);
  const size_t qmark = c.target.find('?');
  EXPECT_EQ(out.path, c.target.substr(0, qmark));
  EXPECT_EQ(out.has_query, qmark != std::string::npos);
  EXPECT_EQ(out.query, qmark == std::string::npos ? "" : c.target.substr(qmark + 1));

  const std::string canonical(out.target);
  std::string again_buffer;
  CanonicalTarget again;
  ASSERT_EQ(CanonicalizeTarget(c.method, canonical, c.options, again_buffer, again), nullptr);
  EXPECT_EQ(again.target, canonical) << "not idempotent";
  if (canonical.find_first_of("%;") == std::string::npos && canonical != "*") {
    EXPECT_TRUE(internal::IsCanonicalFast(canonical)) << canonical;
  }
}

void CheckAll(const std::vector<Case>& cases) {
  for (const Case& c : cases) Check(c);
}

TEST(TargetTest, TheReportedBypassesAreRemovedOrRefused) {
  CheckAll({
      Ok("/public/../v1/items", "/v1/items"),
      Ok("/public/%2e%2e/v1/items", "/v1/items"),
      Bad("/public/..%2fv1/items", kEncodedSlashError),
      Bad("/public/..%2fv1/items", kHiddenDots, kEncodedSlash),
      Ok("/public/./../v1/items", "/v1/items"),
      Bad("/public/..;/v1/items", kParametersError),
      Bad("/public/..;/v1/items", kHiddenDots, kParameters),
      Bad("/public/..\\v1/items", kBackslash),
      Bad("/public/x#/../../v1/items", kFragment),
      Bad("x#/../../v1/items", kNotOriginForm),
      Ok("//login", "/login"),
      Ok("/./login", "/login"),
      Ok("/%6cogin", "/login"),
      Absolute("http://host/login", "/login", "host"),
      Ok("/v1/export?pag%65s=5000", "/v1/export?pages=5000"),
      Ok("/v1/export?pages=1&pages=5000", "/v1/export?pages=1&pages=5000"),
  });
}

TEST(TargetTest, EncodedDotsInEverySpellingAreDotSegments) {
  CheckAll({
      Ok("/public/%2E%2E/v1", "/v1"),
      Ok("/public/%2e%2E/v1", "/v1"),
      Ok("/public/.%2e/v1", "/v1"),
      Ok("/public/%2e./v1", "/v1"),
      Ok("/public/%2e/v1", "/public/v1"),
      Ok("/public/%2e%2e", "/"),
      Ok("/public/%2e%2e?x", "/?x"),
      Ok("/public/%2e%2e%2e/v1", "/public/.../v1"),  // "..." is a name
      Bad("/public/%2e%2e%2f/v1", kEncodedSlashError),
      Bad("/public/%2e%2e%5c/v1", kEncodedSlashError),
      Bad("/public/%2e%2e%5c/v1", kHiddenDots, kEncodedSlash),
      Bad("/public/%2e%2e%3b/v1", kHiddenDots),  // %3B is data, but "..;" to some upstreams
      Bad("/public/.%3bx/v1", kHiddenDots),
      Bad("/public/a%3b../v1", kHiddenDots),  // a ".." parameter is refused too
      Ok("/public/a%3bb/v1", "/public/a%3Bb/v1"),
  });
}

TEST(TargetTest, DotSegmentsAreRemovedAndClampAtTheRoot) {
  CheckAll({
      Ok("/a/b/../../..", "/"),
      Ok("/a/b/../../../c", "/c"),
      Ok("/../x", "/x"),
      Ok("/..", "/"),
      Ok("/.", "/"),
      Ok("/a/./b/.", "/a/b/"),
      Ok("/a/b/..", "/a/"),
      Ok("/a/b/../", "/a/"),
      Ok("/a/b/./", "/a/b/"),
      Ok("/a/..", "/"),
      Ok("/a/../", "/"),
      Ok("/a/b/../c/./d", "/a/c/d"),
      Ok("/a/.b/..c/c./..../...", "/a/.b/..c/c./..../..."),
      Ok("/.well-known/openid-configuration", "/.well-known/openid-configuration"),
  });
}

TEST(TargetTest, RepeatedSlashesAreMergedBeforeDotSegments) {
  CheckAll({
      Ok("///", "/"),
      Ok("/a//b///c", "/a/b/c"),
      Ok("/a//", "/a/"),
      Ok("/a/", "/a/"),      // a trailing slash is the route's business
      Ok("/a//../b", "/b"),  // as nginx's merge_slashes: "/a/../b"
      Ok("//./..//login", "/login"),
      Ok("/a/.//b", "/a/b"),
      Ok("//?x", "/?x"),
  });
}

TEST(TargetTest, UnreservedEscapesAreDecodedAndOthersUppercased) {
  CheckAll({
      Ok("/%41%5a%61%7a%30%39%2d%2e%5f%7e", "/AZaz09-._~"),
      Ok("/%7euser", "/~user"),
      Ok("/caf%c3%a9", "/caf%C3%A9"),
      Ok("/a%20b", "/a%20b"),
      Ok("/%21%24%3d%40%3a", "/%21%24%3D%40%3A"),  // sub-delims stay encoded: they may mean
      Ok("/%25", "/%25"),                          // something to the upstream
      Ok("/%252e%252e/x", "/%252e%252e/x"),        // decoded once only
      Ok("/a%3bb", "/a%3Bb"),                      // an encoded ';' is data, not a parameter
      Ok("/%2f", "/%2F", kEncodedSlash),
      Ok("/%5c", "/%5C", kEncodedSlash),
      Ok("/@scope%2fname/x", "/@scope%2Fname/x", kEncodedSlash),
      Bad("/%2f", kEncodedSlashError),
      Bad("/%2F", kEncodedSlashError),
      Bad("/%5C", kEncodedSlashError),
  });
}

TEST(TargetTest, TheQueryIsDecodedOnlyWhereThatChangesNothing) {
  CheckAll({
      Ok("/x?a=%41", "/x?a=A"),
      Ok("/x?a=%2f%c3%a9%26%3d%2b", "/x?a=%2F%C3%A9%26%3D%2B"),  // '&', '=', '+' stay encoded
      Ok("/x?a=b+c&d", "/x?a=b+c&d"),
      Ok("/x?a=/../b", "/x?a=/../b"),
      Ok("/x?a=1;b=2", "/x?a=1;b=2"),
      Ok("/x?a=%2f%5c", "/x?a=%2F%5C"),  // the options are about the path
      Ok("/x?", "/x?"),
      Ok("/x??", "/x??"),
      Ok("/x", "/x"),
      Ok("/x?filter[name]=a|b&q={\"x\"}", "/x?filter[name]=a|b&q={\"x\"}"),
      Ok("/x/%2e%2e?filter[name]=%61", "/?filter[name]=a"),
      Bad("/x?a#b", kFragment),
      Bad("/x?a\\b", kBackslash),
      Bad("/x?a b", kControl),
      Ok("/x?a=%0A", "/x?a=%0A"),  // form text; the query is forwarded encoded
      Bad("/x?a=%g1", kMalformed),
      Bad("/x?a=%", kMalformed),
  });
}

TEST(TargetTest, BytesOutsideVisibleAsciiAreRefused) {
  CheckAll({
      Bad("/a b", kControl),
      Bad("/a\tb", kControl),
      Bad("/a\x7f", kControl),
      Bad(std::string("/a\0b", 4), kControl),
      Bad("/caf\xc3\xa9", kControl),
      Bad("/a\r\nX-Injected: 1", kControl),
      Bad("/%00", kEncodedControl),
      Bad("/%0d%0a", kEncodedControl),
      Bad("/%1F", kEncodedControl),
      Bad("/%7f", kEncodedControl),
      Ok("/%7e%80%ff", "/~%80%FF"),
  });
}

TEST(TargetTest, MalformedEscapesAreRefused) {
  CheckAll({
      Bad("/%zz", kMalformed),
      Bad("/%4", kMalformed),
      Bad("/%", kMalformed),
      Bad("/a%4g", kMalformed),
      Bad("/%%41", kMalformed),
      Bad("/%2", kMalformed),
  });
}

TEST(TargetTest, PathParametersOnlyWhenAllowed) {
  CheckAll({
      Bad("/a;jsessionid=1/b", kParametersError),
      Ok("/a;jsessionid=1/b", "/a;jsessionid=1/b", kParameters),
      Ok("/a;x/../b", "/b", kParameters),
      Ok("/a;v=1.0/b", "/a;v=1.0/b", kParameters),
      Ok("/;/b", "/;/b", kParameters),
      Bad("/a/.;x/b", kHiddenDots, kParameters),
      Bad("/a/..;/b", kHiddenDots, kParameters),
      Bad("/a/x;../b", kHiddenDots, kParameters),
      Bad("/a/%2e%2e;/b", kHiddenDots, kParameters),
      Bad("/a/..%2F..;/b", kHiddenDots, kBoth),
  });
}

TEST(TargetTest, AbsoluteFormBecomesOriginFormAndTheAuthority) {
  CheckAll({
      Absolute("http://api.example.com:8080/v1?x=1", "/v1?x=1", "api.example.com:8080"),
      Absolute("https://[::1]:8443/x", "/x", "[::1]:8443"),
      Absolute("http://[2001:db8::1]/x", "/x", "[2001:db8::1]"),
      Absolute("http://10.0.0.1/x", "/x", "10.0.0.1"),
      Absolute("HTTP://Host", "/", "Host"),
      Absolute("hTtPs://host:443", "/", "host:443"),
      Absolute("http://host?x=1", "/?x=1", "host"),
      Absolute("http://host//login", "/login", "host"),
      Absolute("http://host/%2e%2e/v1", "/v1", "host"),
      Absolute("http://host/public/../v1?pag%65s=9", "/v1?pages=9", "host"),
      Absolute("http://host:65535/", "/", "host:65535"),
  });
  CheckAll({
      Bad("http://user@host/x", kUserinfo),
      Bad("http://user:pw@host/x", kUserinfo),
      Bad("http://@host/x", kUserinfo),
      Bad("ftp://host/x", kScheme),
      Bad("ws://host/x", kScheme),
      Bad("http:/x", kNotOriginForm),
      Bad("http:x", kNotOriginForm),
      Bad("http://", kEmptyHost),
      Bad("http:///x", kEmptyHost),
      Bad("http://host:/", kPort),
      Bad("http://host:0/", kPort),
      Bad("http://host:65536/", kPort),
      Bad("http://host:99999/", kPort),
      Bad("http://host:000080/", kPort),
      Bad("http://host:80a/", kAuthority),
      Bad("http://[::1/", kAuthority),
      Bad("http://[v1.x]/", kAuthority),
      Bad("http://ho%41st/", kEncodedHost),
      Bad("http://ho st/", kControl),
      Bad("http://evil\\@good/", kBackslash),
      Bad("http://host#frag", kFragment),
      Bad("http://host/x#frag", kFragment),
      Bad("http://host/..%2fx", kEncodedSlashError),
  });
}

TEST(TargetTest, OtherFormsAreRefused) {
  CheckAll({
      Bad("", kEmpty),
      Bad("v1/items", kNotOriginForm),
      Bad("host:443", kNotOriginForm),
      Bad("?x", kNotOriginForm),
      Bad(".", kNotOriginForm),
      Bad("*", kAsterisk),
      Bad("*x", kNotOriginForm),
  });
  Case options_star{"*", "*"};
  options_star.method = "OPTIONS";
  Check(options_star);
  Case options_path{"/x/../y", "/y"};
  options_path.method = "OPTIONS";
  Check(options_path);
  for (const char* raw : {"host:443", "/x", "http://host/"}) {
    Case connect = Bad(raw, kConnect);
    connect.method = "CONNECT";
    Check(connect);
  }
}

TEST(TargetTest, LongTargets) {
  std::string canonical = "/";
  while (canonical.size() < 8192) canonical += "segment/";
  Check(Ok(canonical, canonical));
  std::string climbing = "/";
  for (int i = 0; i < 1000; ++i) climbing += "a/";
  for (int i = 0; i < 1001; ++i) climbing += "%2e%2E/";
  climbing += "v1?q=%41";
  Check(Ok(climbing, "/v1?q=A"));
  Check(Ok("/" + std::string(8190, '/'), "/"));
  Check(Bad("/" + std::string(8190, 'a') + "%", kMalformed));
}

TEST(TargetTest, TheFastPathIsAViewIntoRaw) {
  const std::string raw = "/v1/items/.well-known?page=2&filter[a]=b;c";
  std::string buffer = "left alone";
  CanonicalTarget out;
  ASSERT_EQ(CanonicalizeTarget("GET", raw, kDefault, buffer, out), nullptr);
  EXPECT_TRUE(internal::IsCanonicalFast(raw));
  EXPECT_EQ(out.target.data(), raw.data());
  EXPECT_EQ(out.target.size(), raw.size());
  EXPECT_EQ(out.path.data(), raw.data());
  EXPECT_EQ(out.path, "/v1/items/.well-known");
  EXPECT_EQ(out.query.data(), raw.data() + raw.find('?') + 1);
  EXPECT_EQ(out.query, "page=2&filter[a]=b;c");
  EXPECT_TRUE(out.has_query);
  EXPECT_EQ(buffer, "left alone");
}

TEST(TargetTest, TheFastPathTakesOnlyWhatTheRewriteWouldKeep) {
  for (const char* raw :
       {"/", "/a", "/a/", "/a?", "/a?b", "/.a", "/..a", "/a.", "/...", "/a?/../", "/a?;"}) {
    const bool fast = internal::IsCanonicalFast(raw);
    std::string buffer;
    CanonicalTarget slow;
    const char* error = internal::CanonicalizeTargetSlow("GET", raw, kBoth, buffer, slow);
    if (fast) {
      EXPECT_EQ(error, nullptr) << raw;
      EXPECT_EQ(slow.target, raw);
    }
  }
  for (const char* raw :
       {"//",   "/.",   "/..",   "/./",  "/../", "/.?",    "/..?", "/a//b", "/a/./b",    "/a/../b",
        "/%41", "/a;b", "/a\\b", "/a#b", "/a?#", "/a?%41", "/a b", "*",     "http://h/", ""}) {
    EXPECT_FALSE(internal::IsCanonicalFast(raw)) << raw;
  }
}

// The fast path reads 16 bytes at a time: whatever needs the rewrite is seen at every offset,
// in short parts (copied), whole blocks and the overlapping last block, in the path and query.
TEST(TargetTest, TheFastPathSeesEveryByteWhereverItFallsInABlock) {
  for (const std::string bad :
       {"//", "/./", "/../", "/.?", "/..?", "%41", ";", "\\", "#", " ", "\x7f", "\x80"}) {
    for (size_t before = 0; before < 40; ++before) {
      for (size_t after = 0; after < 40; after += 13) {
        const std::string path = "/" + std::string(before, 'a') + bad + std::string(after, 'b');
        const std::string query = "/x?" + std::string(before, 'a') + bad + std::string(after, 'b');
        EXPECT_FALSE(internal::IsCanonicalFast(path)) << path;
        if (bad.find_first_of("%\\# \x7f\x80") != std::string::npos) {
          EXPECT_FALSE(internal::IsCanonicalFast(query)) << query;
        } else {
          EXPECT_TRUE(internal::IsCanonicalFast(query)) << query;
        }
      }
    }
  }
  for (size_t size = 1; size < 70; ++size) {
    std::string path = "/";
    while (path.size() < size) path += path.size() % 7 == 0 ? "/" : "a";
    const std::string target = path + "?" + std::string(size, 'q');
    EXPECT_TRUE(internal::IsCanonicalFast(path)) << path;
    EXPECT_TRUE(internal::IsCanonicalFast(target)) << target;
    if (!path.ends_with('/')) {
      EXPECT_TRUE(internal::IsCanonicalFast(path + "/.well-known")) << path;
    }
  }
}

// The buffer is reused from request to request: a canonical answer never holds what an earlier,
// longer one left behind.
TEST(TargetTest, AReusedBufferHoldsOnlyTheLatestTarget) {
  std::string buffer;
  CanonicalTarget out;
  ASSERT_EQ(CanonicalizeTarget("GET", "/a/b/c/d/e/f/%2e%2e?x=%41%41%41", kDefault, buffer, out),
            nullptr);
  EXPECT_EQ(out.target, "/a/b/c/d/e/?x=AAA");
  ASSERT_EQ(CanonicalizeTarget("GET", "/%41", kDefault, buffer, out), nullptr);
  EXPECT_EQ(out.target, "/A");
  EXPECT_EQ(buffer, "/A");
  EXPECT_FALSE(out.has_query);
  EXPECT_EQ(out.query, "");
}

}  // namespace
}  // namespace tollgate::util
