#include <tollgate/http/admin_guard.hpp>

#include <gtest/gtest.h>

namespace tollgate::http {
namespace {

TEST(AdminGuard, LoopbackListenerAnswersItsOwnNamesAndAddressesOnly) {
  const AdminGuard g("127.0.0.1:9090", {"tollgate-admin.internal"}, "");
  for (const char* host :
       {"localhost", "localhost:9090", "LOCALHOST", "LocalHost:1", "localhost.", "localhost.:9090",
        "127.0.0.1", "127.0.0.1:9090", "127.0.0.2", "[::1]", "[::1]:9090", "[0:0:0:0:0:0:0:1]",
        "[::ffff:127.0.0.1]", "tollgate-admin.internal", "TOLLGATE-ADMIN.internal.:80",
        "localhost:"}) {
    EXPECT_TRUE(g.HostAllowed(host)) << host;
  }
  for (const char* host : {"",
                           "evil.example",
                           "evil.example:9090",
                           "localhost.evil.example",
                           "127.0.0.1.nip.io",
                           "0x7f000001",
                           "2130706433",
                           "127.1",
                           "0127.0.0.1",
                           "127.0.0.01",
                           "10.0.0.1",
                           "[::2]",
                           "[fe80::1%25lo]",
                           "[::1",
                           "::1",
                           "localhost:9090:1",
                           "localhost:abc",
                           "localhost:123456",
                           "localhost..",
                           "x.localhost",
                           "tollgate-admin",
                           ":9090",
                           "[]"}) {
    EXPECT_FALSE(g.HostAllowed(host)) << host;
  }
}

TEST(AdminGuard, WildcardListenerAnswersAnyAddressButNoOtherName) {
  const AdminGuard g("0.0.0.0:9090", {}, "t");
  EXPECT_TRUE(g.HostAllowed("10.1.2.3:9090"));
  EXPECT_TRUE(g.HostAllowed("[2001:db8::1]:9090"));
  EXPECT_TRUE(g.HostAllowed("localhost"));
  EXPECT_FALSE(g.HostAllowed("gw-1:9090"));
  EXPECT_FALSE(g.HostAllowed("0x0a010203"));
}

TEST(AdminGuard, BoundAddressAndNameAreItsOwn) {
  const AdminGuard v4("10.0.0.5:9090", {}, "t");
  EXPECT_TRUE(v4.HostAllowed("10.0.0.5:9090"));
  EXPECT_FALSE(v4.HostAllowed("10.0.0.6:9090"));
  const AdminGuard v6("[fd00::5]:9090", {}, "t");
  EXPECT_TRUE(v6.HostAllowed("[fd00:0::5]"));
  EXPECT_FALSE(v6.HostAllowed("[fd00::6]"));
  const AdminGuard named("admin.internal:9090", {}, "t");
  EXPECT_TRUE(named.HostAllowed("Admin.Internal:9090"));
}

TEST(AdminGuard, ConfiguredAddressesMatchAnySpellingOfThem) {
  const AdminGuard g("127.0.0.1:9090", {"[fd00::9]", "10.0.0.9", "fd00::10"}, "");
  EXPECT_TRUE(g.HostAllowed("[fd00::9]:9090"));
  EXPECT_TRUE(g.HostAllowed("[FD00:0:0::9]"));
  EXPECT_TRUE(g.HostAllowed("[fd00::10]"));
  EXPECT_TRUE(g.HostAllowed("10.0.0.9:1"));
  EXPECT_FALSE(g.HostAllowed("10.0.0.09"));
  EXPECT_FALSE(g.HostAllowed("[fd00::8]"));
  EXPECT_FALSE(g.HostAllowed("0.0.0.0:9090"));
  EXPECT_FALSE(g.HostAllowed("[::]:9090"));
}

RequestHead WithFields(std::vector<RequestHead::Field> fields) {
  RequestHead h;
  h.method = "POST";
  h.target = "/admin/reload";
  h.fields = std::move(fields);
  return h;
}

TEST(AdminGuard, TokenFormsAndNoTokenConfigured) {
  const AdminGuard none("127.0.0.1:9090", {}, "");
  EXPECT_FALSE(none.token_required());
  EXPECT_EQ(none.CheckToken(WithFields({})), AdminGuard::Token::kOk);

  const AdminGuard g("127.0.0.1:9090", {}, "s3cret-token");
  EXPECT_TRUE(g.token_required());
  using T = AdminGuard::Token;
  const std::vector<std::pair<std::vector<RequestHead::Field>, T>> cases = {
      {{}, T::kMissing},
      {{{"Host", "localhost"}}, T::kMissing},
      {{{"Authorization", "Bearer s3cret-token"}}, T::kOk},
      {{{"authorization", "bearer s3cret-token"}}, T::kOk},
      {{{"AUTHORIZATION", "BEARER   s3cret-token"}}, T::kOk},
      {{{"Authorization", "Bearer s3cret-token "}}, T::kOk},
      {{{"Authorization", "Bearer s3cret-tokeN"}}, T::kInvalid},
      {{{"Authorization", "Bearer s3cret-toke"}}, T::kInvalid},
      {{{"Authorization", "Bearer s3cret-token2"}}, T::kInvalid},
      {{{"Authorization", "Bearer s3cret token"}}, T::kInvalid},
      {{{"Authorization", "Bearer"}}, T::kInvalid},
      {{{"Authorization", "Bearer "}}, T::kInvalid},
      {{{"Authorization", "Bearers3cret-token"}}, T::kInvalid},
      {{{"Authorization", "Bearer\ts3cret-token"}}, T::kInvalid},
      {{{"Authorization", "Basic czNjcmV0LXRva2Vu"}}, T::kInvalid},
      {{{"Authorization", "Token s3cret-token"}}, T::kInvalid},
      {{{"Authorization", "s3cret-token"}}, T::kInvalid},
      {{{"Authorization", "Bearer s3cret-token"}, {"Authorization", "Bearer s3cret-token"}},
       T::kInvalid},
      {{{"Authorization", "Bearer wrong"}, {"Authorization", "Bearer s3cret-token"}}, T::kInvalid},
      {{{"X-Admin-Token", "s3cret-token"}}, T::kMissing},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(g.CheckToken(WithFields(cases[i].first)), cases[i].second) << "case " << i;
  }
}

TEST(AdminGuard, OnlyGetAndHeadAreReads) {
  EXPECT_FALSE(AdminGuard::Mutates("GET"));
  EXPECT_FALSE(AdminGuard::Mutates("HEAD"));
  for (const char* m : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS", "get", "TRACE"}) {
    EXPECT_TRUE(AdminGuard::Mutates(m)) << m;
  }
}

}  // namespace
}  // namespace tollgate::http
