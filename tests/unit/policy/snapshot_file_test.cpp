#include "policy/postgres/snapshot_file.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tollgate::policy::internal {

// Readable failures (internal linkage: each test file has its own).
[[maybe_unused]] static void PrintTo(const KeyRecord& r, std::ostream* os) {
  *os << "{" << r.key_sha256 << ", " << r.key_id << ", " << r.account_id << ", " << r.plan << ", "
      << r.rate_limit_per_minute << ", " << r.rate_limit_burst << ", " << r.overrides << "}";
}

namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tollgate-snapshot-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<KeyRecord> Rows() {
  return {
      {.key_sha256 = std::string(64, 'a'),
       .key_id = "a",
       .account_id = "acct-a",
       .plan = "team",
       .rate_limit_per_minute = "30",
       .rate_limit_burst = "10",
       // As PostgreSQL's rows are read: in boost::json's spelling (0.5 is 5E-1).
       .overrides = CompactJson(R"({"burst": {"capacity": 5000, "refill_per_second": 0.5}})")},
      {.key_sha256 = std::string(64, 'b'),
       .key_id = "b",
       .account_id = "",
       .plan = "gold",
       .rate_limit_per_minute = "600",
       .rate_limit_burst = "many",
       .overrides = ""},
  };
}

TEST(SnapshotFile, TextHasOneRowPerLine) {
  const std::string text = SnapshotText(Rows(), 1'800'000'000);
  EXPECT_EQ(text.rfind(R"({"version":1,"written_at_unix_s":1800000000,"keys":[)"
                       "\n",
                       0),
            0u)
      << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);  // head, two rows, tail
  EXPECT_EQ(text.substr(text.size() - 4), "\n]}\n");
  EXPECT_EQ(SnapshotText({}, 5), "{\"version\":1,\"written_at_unix_s\":5,\"keys\":[\n]}\n");
}

TEST(SnapshotFile, RoundTripGivesTheSameRows) {
  TempDir dir;
  const std::string path = dir.File("keys.json");
  ASSERT_EQ(WriteFileAtomically(path, SnapshotText(Rows(), 1)), "");
  const auto read = ReadSnapshotFile(path);
  ASSERT_TRUE(read.ok()) << read.error();
  EXPECT_EQ(*read, Rows());
}

TEST(SnapshotFile, WrittenPrivateAndWhole) {
  TempDir dir;
  const std::string path = dir.File("keys.json");
  ASSERT_EQ(WriteFileAtomically(path, "first"), "");
  ASSERT_EQ(WriteFileAtomically(path, "second"), "");
  EXPECT_EQ(ReadAll(path), "second");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // No temporary file left behind.
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1);
}

TEST(SnapshotFile, WriteErrorsNameTheFile) {
  TempDir dir;
  const std::string path = dir.File("missing/keys.json");
  const std::string error = WriteFileAtomically(path, "x");
  EXPECT_EQ(error.rfind("cannot create '" + path + ".tmp." + std::to_string(::getpid()) + "': ", 0),
            0u)
      << error;
}

TEST(SnapshotFile, ReadErrorsCompleteTheSentence) {
  TempDir dir;
  EXPECT_EQ(ReadSnapshotFile("").error(),
            "no snapshot file is configured (snapshot_path is empty)");
  const std::string missing = dir.File("missing.json");
  EXPECT_EQ(ReadSnapshotFile(missing).error(), "there is no snapshot file at '" + missing + "'");

  const std::string path = dir.File("keys.json");
  const std::string bad = "the snapshot file '" + path + "' cannot be used: ";
  auto error_of = [&](const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
    return ReadSnapshotFile(path).error();
  };
  EXPECT_EQ(error_of(R"({"version": 1, "keys": [)").rfind(bad + "not valid JSON (", 0), 0u);
  EXPECT_EQ(error_of(R"({"version": 2, "keys": []})"), bad + "version: must be 1");
  EXPECT_EQ(error_of(R"({"keys": []})"), bad + "version: must be 1");
  EXPECT_EQ(error_of(R"([1])"), bad + "version: must be 1");
  EXPECT_EQ(error_of(R"({"version": 1, "keys": {}})"), bad + "keys: must be a list");
}

TEST(SnapshotFile, EntriesThatAreNotRowsReadAsEmptyRows) {
  TempDir dir;
  const std::string path = dir.File("keys.json");
  std::ofstream(path) << R"({"version": 1, "keys": [7, {"key_id": "x"}]})";
  const auto read = ReadSnapshotFile(path);
  ASSERT_TRUE(read.ok()) << read.error();
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[0], KeyRecord{});  // no key id: CheckRow refuses it, logged and counted
  EXPECT_EQ((*read)[1].key_id, "x");
}

}  // namespace
}  // namespace tollgate::policy::internal
