#include <tollgate/util/path_fold.hpp>

#include <string>

#include <gtest/gtest.h>

namespace tollgate::util {
namespace {

std::string Fold(std::string_view path) {
  std::string out = "left over";
  FoldPath(path, out);
  return out;
}

TEST(PathFold, FoldsWhatUpstreamsRouteAlike) {
  // Issue 31: every spelling a common upstream routes to "/login".
  const struct {
    const char* path;
    const char* folded;
  } cases[] = {
      {"/login", "/login"},
      {"/LOGIN", "/login"},
      {"/LoGiN/", "/login/"},
      {"/login.", "/login"},
      {"/login..", "/login"},
      {"/login.%20", "/login"},
      {"/login%20", "/login"},
      {"/login;jsessionid=1", "/login"},
      {"/LOGIN;x/", "/login/"},
      {"/%EF%BC%AC%EF%BC%AF%EF%BC%A7%EF%BC%A9%EF%BC%AE", "/login"},  // full-width LOGIN
      {"/%EF%BD%8Cogin", "/login"},                                  // full-width l
      {"/lo%C4%B1n", "/loin"},                                       // dotless i
      {"/log%C4%B0n", "/login"},                                     // capital I with dot
      {"/%C5%BFearch", "/search"},                                   // long s
      {"/%E2%84%AAeys", "/keys"},                                    // Kelvin sign
      {"/a%21b", "/a!b"},
      {"/a%2Fb", "/a%2Fb"},  // never a separator
      {"/a%5Cb", "/a%5Cb"},
      {"/a%25b", "/a%25b"},
      {"/a%3Fb", "/a%3Fb"},
      {"/v1/.../items", "/v1/items"},
      {"/v1/%20/items", "/v1/items"},
      {"/", "/"},
      {"*", "*"},
      {"/v1/Export.CSV", "/v1/export.csv"},
      {"/%E2%82%AC", "/%E2%82%AC"},  // other UTF-8 stays encoded
  };
  for (const auto& c : cases) EXPECT_EQ(Fold(c.path), c.folded) << c.path;
}

TEST(PathFold, NeedsFoldIsTrueWheneverTheFoldDiffers) {
  const char* paths[] = {"/login", "/LOGIN",     "/login.", "/a.b/c",    "/a./b", "/a;b",
                         "/%41",   "/v1/items/", "/",       "/a/b.json", "/x%20"};
  for (const char* p : paths) {
    if (!PathNeedsFold(p)) {
      EXPECT_EQ(Fold(p), p) << p;
    }
  }
  EXPECT_FALSE(PathNeedsFold("/v1/items/42"));
  EXPECT_TRUE(PathNeedsFold("/v1/Items"));
  EXPECT_TRUE(PathNeedsFold("/login."));
}

TEST(PathFold, FormatSuffix) {
  // Rails' (.:format): '.' and anything but '/', '.' and '?'.
  for (const char* s : {".json", ".csv", ".x", ".mp4", ".HTML", ".json-x", ".a_b", ".js%20on",
                        ".abcdefghijklmnopqrstuvwxyz0123456789"}) {
    EXPECT_TRUE(IsFormatSuffix(s)) << s;
  }
  for (const char* s : {"", ".", "json", ".json/x", ".json.gz", "..", ".a?b"}) {
    EXPECT_FALSE(IsFormatSuffix(s)) << s;
  }
}

}  // namespace
}  // namespace tollgate::util
