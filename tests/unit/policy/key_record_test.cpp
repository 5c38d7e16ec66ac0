#include "policy/postgres/key_record.hpp"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cctype>
#include <tollgate/util/digest.hpp>

namespace tollgate::policy::internal {

// Readable failures (internal linkage: each test file has its own).
[[maybe_unused]] static void PrintTo(const KeyRecord& r, std::ostream* os) {
  *os << "{" << r.key_sha256 << ", " << r.key_id << ", " << r.account_id << ", " << r.plan << ", "
      << r.rate_limit_per_minute << ", " << r.rate_limit_burst << ", " << r.overrides << "}";
}

namespace {

namespace json = boost::json;

std::vector<config::PlanConfig> Plans() {
  auto c = config::ParseConfig(R"(
plans:
  team:
    limits:
      - {name: burst, capacity: 200, refill_per_second: 5}
      - {name: minute, algorithm: sliding_window_log, window_seconds: 60, limit: 600, from_key: true}
)");
  EXPECT_TRUE(c.ok()) << c.error();
  return c->plans;
}

KeyRecord Row(const std::string& id = "k1") {
  return {.key_sha256 = util::Sha256Hex("secret-" + id),
          .key_id = id,
          .account_id = "acct",
          .plan = "team",
          .rate_limit_per_minute = "30",
          .rate_limit_burst = "10",
          .overrides = ""};
}

// The one problem CheckRow reported, as "error / action".
std::string OnlyProblem(const KeyRecord& r) {
  std::vector<RowProblem> problems;
  CheckRow(r, Plans(), problems);
  if (problems.size() != 1) return "problems: " + std::to_string(problems.size());
  return problems[0].error + " / " + problems[0].action;
}

TEST(CheckRow, AGoodRowIsAKey) {
  KeyRecord r = Row();
  r.overrides = R"({"burst":{"capacity":5000,"refill_per_second":0.5,"expires":"2026-12-31"}})";
  std::vector<RowProblem> problems;
  const auto k = CheckRow(r, Plans(), problems);
  ASSERT_TRUE(k.has_value());
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(k->id, "k1");
  EXPECT_EQ(k->sha256_hex, r.key_sha256);
  EXPECT_EQ(k->account, "acct");
  EXPECT_EQ(k->plan, "team");
  EXPECT_EQ(k->rate_limit_per_minute, 30);
  EXPECT_EQ(k->rate_limit_burst, 10);
  ASSERT_EQ(k->overrides.size(), 1u);
  EXPECT_EQ(k->overrides[0].limit, "burst");
  EXPECT_EQ(k->overrides[0].spec.capacity, 5000);
  EXPECT_EQ(k->overrides[0].spec.refill, core::Rate::Parse("0.5", 1).value());
  EXPECT_EQ(k->overrides[0].expires_unix_s, core::DaysFromCivil({2026, 12, 31}) * 86'400);
}

TEST(CheckRow, DigestIsTrimmedAndLowercased) {
  KeyRecord r = Row();
  std::string upper = r.key_sha256;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  r.key_sha256 = upper + "   ";  // char(64) pads with spaces
  std::vector<RowProblem> problems;
  const auto k = CheckRow(r, Plans(), problems);
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->sha256_hex, Row().key_sha256);
}

TEST(CheckRow, AnEmptyAccountIsTheKeyItself) {
  KeyRecord r = Row();
  r.account_id = "";
  std::vector<RowProblem> problems;
  EXPECT_EQ(CheckRow(r, Plans(), problems)->account, "k1");
}

TEST(CheckRow, RowsThatCannotBeLookedUpAreSkipped) {
  KeyRecord r = Row();
  r.key_id = "";
  EXPECT_EQ(OnlyProblem(r), "key_id: must not be empty / row skipped");
  r = Row();
  r.key_sha256 = "not-a-digest";
  EXPECT_EQ(OnlyProblem(r),
            "key_sha256: must be 64 hex digits (the SHA-256 of the key) / row skipped");
  std::vector<RowProblem> problems;
  EXPECT_FALSE(CheckRow(r, Plans(), problems).has_value());
}

// Issue 18: these travel in X-Tollgate-* fields of upstream requests.
TEST(CheckRow, ControlCharactersSkipTheRow) {
  KeyRecord r = Row();
  r.key_id = "a\r\nX-Evil: 1";
  EXPECT_EQ(OnlyProblem(r), "key_id: must not contain control characters / row skipped");
  r = Row();
  r.account_id = "x\ny";
  EXPECT_EQ(OnlyProblem(r), "account_id: must not contain control characters / row skipped");
  r = Row();
  r.plan = "team\r";
  EXPECT_EQ(OnlyProblem(r), "plan: must not contain control characters / row skipped");
}

// migrations/002: a key's own mode (issue 20); anything else than the two words is refused
// for that column only.
TEST(CheckRow, ModeColumn) {
  for (const auto& [text, mode] :
       {std::pair<const char*, std::optional<config::Mode>>{"", std::nullopt},
        {"enforce", config::Mode::kEnforce},
        {"shadow", config::Mode::kShadow}}) {
    KeyRecord r = Row();
    r.mode = text;
    std::vector<RowProblem> problems;
    const auto k = CheckRow(r, Plans(), problems);
    ASSERT_TRUE(k.has_value()) << text;
    EXPECT_EQ(k->mode, mode) << text;
    EXPECT_TRUE(problems.empty()) << text;
  }
  for (const char* bad : {"Enforce", "loud", "enforce ", "shadow\n"}) {
    KeyRecord r = Row();
    r.mode = bad;
    EXPECT_EQ(OnlyProblem(r), "mode: must be enforce or shadow, got '" + std::string(bad) +
                                  "' / key loaded with its plan's mode")
        << bad;
  }
  // Through the snapshot file and back.
  KeyRecord r = Row();
  r.mode = "shadow";
  EXPECT_EQ(RecordFromJson(RecordJson(r)), r);
}

TEST(CheckRow, UnknownPlanKeepsTheKeyWithoutPerKeyValues) {
  KeyRecord r = Row();
  r.plan = "gold";
  r.overrides = R"({"burst":{"capacity":5}})";
  EXPECT_EQ(
      OnlyProblem(r),
      "plan: unknown plan 'gold' / key loaded with the strictest plan, without per-key values");
  std::vector<RowProblem> problems;
  const auto k = CheckRow(r, Plans(), problems);
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->plan, "gold");  // Policy::Build gives it the strictest plan
  EXPECT_FALSE(k->rate_limit_per_minute.has_value());
  EXPECT_TRUE(k->overrides.empty());
}

TEST(CheckRow, BadPerKeyColumnsDropOnlyThePerKeyLimit) {
  const std::string action = " / key loaded without its per-key limit";
  KeyRecord r = Row();
  r.rate_limit_per_minute = "many";
  EXPECT_EQ(OnlyProblem(r), "rate_limit_per_minute: must be an integer, got 'many'" + action);
  r = Row();
  r.rate_limit_burst = "1.5";
  EXPECT_EQ(OnlyProblem(r), "rate_limit_burst: must be an integer, got '1.5'" + action);
  r = Row();
  r.rate_limit_per_minute = "0";
  EXPECT_EQ(OnlyProblem(r), "rate_limit_per_minute: must be >= 1, got 0" + action);
  r = Row();
  r.rate_limit_burst = "-1";
  EXPECT_EQ(OnlyProblem(r), "rate_limit_burst: must be >= 0, got -1" + action);
  std::vector<RowProblem> problems;
  const auto k = CheckRow(r, Plans(), problems);
  ASSERT_TRUE(k.has_value());
  EXPECT_FALSE(k->rate_limit_per_minute.has_value());
  EXPECT_FALSE(k->rate_limit_burst.has_value());
}

TEST(CheckRow, BadOverridesDropOnlyTheOverrides) {
  const std::string action = " / key loaded without its overrides";
  auto problem = [](const std::string& overrides) {
    KeyRecord r = Row();
    r.overrides = overrides;
    return OnlyProblem(r);
  };
  EXPECT_EQ(problem("{").substr(0, 26), "overrides: not valid JSON:");
  EXPECT_EQ(problem("[1]"), "overrides: must be a JSON object of limit name -> fields" + action);
  EXPECT_EQ(problem(R"({"burst":5})"), "overrides.burst: must be a JSON object of fields" + action);
  EXPECT_EQ(problem(R"({"burst":{"capacity":[1]}})"),
            "overrides.burst.capacity: must be a number or a string" + action);
  EXPECT_EQ(problem(R"({"burst":{"capacity":-1}})"),
            "overrides.burst.capacity: must be >= 1, got -1" + action);
  EXPECT_EQ(problem(R"({"nope":{"capacity":1}})"),
            "overrides.nope: plan 'team' has no limit named 'nope'" + action);

  KeyRecord r = Row();
  r.overrides = R"({"burst":{"capacity":-1}})";
  std::vector<RowProblem> problems;
  const auto k = CheckRow(r, Plans(), problems);
  ASSERT_TRUE(k.has_value());
  EXPECT_TRUE(k->overrides.empty());
  EXPECT_EQ(k->rate_limit_per_minute, 30);  // the rest of the row stands
}

TEST(CheckRow, NullOverridesAreNone) {
  KeyRecord r = Row();
  r.overrides = "null";
  std::vector<RowProblem> problems;
  const auto k = CheckRow(r, Plans(), problems);
  ASSERT_TRUE(k.has_value());
  EXPECT_TRUE(problems.empty());
  EXPECT_TRUE(k->overrides.empty());
}

TEST(CheckRow, JsonScalarsReadAsTheYamlLoaderReadsThem) {
  KeyRecord r = Row();
  r.overrides = R"({"burst":{"capacity":"300","refill_per_second":2.5E-1}})";
  std::vector<RowProblem> problems;
  const auto k = CheckRow(r, Plans(), problems);
  ASSERT_TRUE(k.has_value());
  ASSERT_TRUE(problems.empty()) << problems[0].error;
  EXPECT_EQ(k->overrides.at(0).spec.capacity, 300);
  EXPECT_EQ(k->overrides.at(0).spec.refill, core::Rate::Parse("0.25", 1).value());
}

TEST(CompactJson, OneSpellingForJsonbAndTheSnapshotFile) {
  EXPECT_EQ(CompactJson(R"({"burst": {"capacity": 5000}})"), R"({"burst":{"capacity":5000}})");
  EXPECT_EQ(CompactJson("not json"), "not json");
}

TEST(RecordJson, NumbersAsNumbersAndTextAsText) {
  KeyRecord r = Row();
  r.overrides = R"({"burst":{"capacity":5}})";
  const json::object o = RecordJson(r);
  EXPECT_EQ(o.at("rate_limit_per_minute"), json::value(30));
  EXPECT_EQ(o.at("rate_limit_burst"), json::value(10));
  EXPECT_EQ(o.at("overrides"), json::parse(r.overrides));
  EXPECT_EQ(o.at("key_id"), json::value("k1"));

  r.rate_limit_per_minute = "many";
  r.overrides = "";
  const json::object o2 = RecordJson(r);
  EXPECT_EQ(o2.at("rate_limit_per_minute"), json::value("many"));
  EXPECT_TRUE(o2.at("overrides").is_null());
}

TEST(RecordJson, RoundTripGivesTheSameRow) {
  for (KeyRecord r : {Row("a"), Row("b")}) {
    r.overrides = CompactJson(R"({"burst": {"capacity": 5000, "expires": "2026-12-31"}})");
    EXPECT_EQ(RecordFromJson(json::parse(json::serialize(RecordJson(r)))), r);
    r.overrides = "";
    r.rate_limit_burst = "lots";  // refused again when checked
    EXPECT_EQ(RecordFromJson(json::parse(json::serialize(RecordJson(r)))), r);
  }
}

TEST(RecordFromJson, MissingAndNullFieldsAreEmpty) {
  EXPECT_EQ(RecordFromJson(json::parse("7")), KeyRecord{});
  const KeyRecord r =
      RecordFromJson(json::parse(R"({"key_id": "x", "plan": null, "rate_limit_burst": 1.5})"));
  EXPECT_EQ(r.key_id, "x");
  EXPECT_EQ(r.plan, "");
  EXPECT_EQ(r.account_id, "");
  EXPECT_EQ(r.rate_limit_burst, "1.5");  // refused by CheckRow as not an integer
  EXPECT_EQ(r.overrides, "");
}

}  // namespace
}  // namespace tollgate::policy::internal
