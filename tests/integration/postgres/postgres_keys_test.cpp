#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <tollgate/policy/policy.hpp>
#include <tollgate/policy/postgres_keys.hpp>
#include <tollgate/util/digest.hpp>

#include "support/postgres_server.hpp"
#include "support/wait.hpp"

namespace tollgate::policy {
namespace {

using namespace std::chrono_literals;
using config::KeyConfig;
using SteadyClock = std::chrono::steady_clock;
using testing::WaitUntil;  // bounded, like every wait here

// Plans as a gateway would configure them: `minute` takes its limit from the key's columns.
const char* kPlansYaml = R"(
plans:
  free:
    limits:
      - {name: burst, capacity: 20, refill_per_second: 0.5}
      - {name: minute, algorithm: sliding_window_log, window_seconds: 60, limit: 60, from_key: true}
  team:
    limits:
      - {name: burst, capacity: 200, refill_per_second: 5}
      - {name: minute, algorithm: sliding_window_log, window_seconds: 60, limit: 600, from_key: true}
)";

config::Config BaseConfig() { return config::ParseConfig(kPlansYaml).value(); }

std::string Digest(const std::string& key_id) { return util::Sha256Hex("secret-" + key_id); }

const KeyConfig* Find(const std::vector<KeyConfig>& keys, const std::string& id) {
  for (const auto& k : keys)
    if (k.id == id) return &k;
  return nullptr;
}

std::set<std::string> Ids(const std::vector<KeyConfig>& keys) {
  std::set<std::string> out;
  for (const auto& k : keys) out.insert(k.id);
  return out;
}

std::string ReadMigration(const char* file = "001_api_keys.sql") {
  return testing::PostgresServer::ReadAll(std::string(TOLLGATE_SOURCE_DIR) + "/migrations/" + file);
}

// What the source reported through its callbacks. Thread-safe.
class Recorder {
 public:
  PostgresKeySource::ChangeCallback OnChange() {
    return [this](std::vector<KeyConfig> keys) {
      std::lock_guard lock(mu_);
      latest_ = std::move(keys);
      ++changes_;
    };
  }
  PostgresKeySource::LogCallback OnLog() {
    return [this](const std::string& line) {
      std::lock_guard lock(mu_);
      logs_.push_back(line);
    };
  }
  int changes() {
    std::lock_guard lock(mu_);
    return changes_;
  }
  std::vector<KeyConfig> latest() {
    std::lock_guard lock(mu_);
    return latest_;
  }
  // Waits until the latest key list delivered by on_change satisfies `pred`.
  bool WaitForKeys(const std::function<bool(const std::vector<KeyConfig>&)>& pred,
                   std::chrono::milliseconds timeout) {
    return WaitUntil(
        [&] {
          std::lock_guard lock(mu_);
          return changes_ > 0 && pred(latest_);
        },
        timeout);
  }
  // The log lines containing every one of `parts`.
  int CountLogs(std::initializer_list<std::string> parts) {
    std::lock_guard lock(mu_);
    int n = 0;
    for (const auto& l : logs_) {
      bool all = true;
      for (const auto& p : parts) all = all && l.find(p) != std::string::npos;
      n += all;
    }
    return n;
  }
  std::string AllLogs() {
    std::lock_guard lock(mu_);
    std::string out;
    for (const auto& l : logs_) out += l + "\n";
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<KeyConfig> latest_;
  int changes_ = 0;
  std::vector<std::string> logs_;
};

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tollgate-keys-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// One PostgreSQL server per test process; a fresh database with the migration per test.
class PostgresKeys : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (testing::PostgresUnavailable().empty()) server_ = new testing::PostgresServer();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (!server_) GTEST_SKIP() << "PostgreSQL tests: " << testing::PostgresUnavailable();
    server_->Start();  // a test may have left it stopped
    db_ = server_->NewDatabase();
    // Twice: the migration must be idempotent.
    server_->Exec(ReadMigration(), db_);
    server_->Exec(ReadMigration(), db_);
  }

  PostgresKeySourceOptions Options() {
    PostgresKeySourceOptions o;
    o.url = server_->Url(db_);
    o.plans = BaseConfig().plans;
    o.snapshot_path = dir_.File("keys.json");
    o.reconnect_max_ms = 300;
    o.connect_timeout_ms = 2000;
    o.query_timeout_ms = 2000;
    return o;
  }

  std::unique_ptr<PostgresKeySource> StartSource(PostgresKeySourceOptions o) {
    auto s = PostgresKeySource::Start(std::move(o), recorder_.OnChange(), recorder_.OnLog());
    EXPECT_TRUE(s.ok()) << s.error();
    return s ? std::move(s).value() : nullptr;
  }

  // Inserts an active key; `columns`/`values` add to key_sha256, key_id, account_id, plan.
  void Insert(const std::string& id, const std::string& plan, const std::string& columns = "",
              const std::string& values = "") {
    server_->Exec("INSERT INTO api_keys (key_sha256, key_id, account_id, plan" + columns +
                      ") VALUES ('" + Digest(id) + "', '" + id + "', 'acct-" + id + "', '" + plan +
                      "'" + values + ")",
                  db_);
  }
  void Sql(const std::string& sql) { server_->Exec(sql, db_); }

  static testing::PostgresServer* server_;
  std::string db_;
  TempDir dir_;
  Recorder recorder_;
};

testing::PostgresServer* PostgresKeys::server_ = nullptr;

TEST_F(PostgresKeys, LoadsTheActiveKeysAtStart) {
  Insert("a", "team", ", rate_limit_per_minute, rate_limit_burst, overrides",
         ", 30, 10, '{\"burst\": {\"capacity\": 5000, \"refill_per_second\": 120, \"expires\": "
         "\"2026-12-31\"}}'");
  Insert("b", "free", ", status", ", 'revoked'");
  Sql("INSERT INTO api_keys (key_sha256, key_id, account_id, plan) VALUES ('" + Digest("c") +
      "', 'c', '', 'free')");

  auto source = StartSource(Options());
  ASSERT_TRUE(source);
  const auto keys = source->Keys();
  EXPECT_EQ(Ids(keys), (std::set<std::string>{"a", "c"}));  // b is revoked: 401
  const KeyConfig* a = Find(keys, "a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->sha256_hex, Digest("a"));
  EXPECT_EQ(a->account, "acct-a");
  EXPECT_EQ(a->plan, "team");
  EXPECT_EQ(a->rate_limit_per_minute, 30);
  EXPECT_EQ(a->rate_limit_burst, 10);
  ASSERT_EQ(a->overrides.size(), 1u);
  EXPECT_EQ(a->overrides[0].limit, "burst");
  EXPECT_EQ(a->overrides[0].spec.capacity, 5000);
  EXPECT_EQ(a->overrides[0].spec.refill, core::Rate::Parse("120", 1).value());
  EXPECT_EQ(a->overrides[0].expires_unix_s, core::DaysFromCivil({2026, 12, 31}) * 86'400);
  const KeyConfig* c = Find(keys, "c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->account, "c");                // an empty account is the key itself, as in YAML keys
  EXPECT_EQ(c->rate_limit_per_minute, 600);  // the column defaults
  EXPECT_EQ(c->rate_limit_burst, 100);

  EXPECT_EQ(source->stats().loads, 1u);
  EXPECT_TRUE(source->stats().connected);
  EXPECT_FALSE(source->stats().using_snapshot_file);
  EXPECT_EQ(source->stats().skipped_rows, 0u);
  EXPECT_EQ(source->stats().errors, 0u);
  EXPECT_EQ(recorder_.changes(), 0);  // Start's own list is read with Keys()

  // The snapshot file: written at once, private, digests only.
  struct stat st {};
  ASSERT_EQ(::stat(Options().snapshot_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string snapshot = testing::PostgresServer::ReadAll(Options().snapshot_path);
  EXPECT_NE(snapshot.find(Digest("a")), std::string::npos);
  EXPECT_EQ(snapshot.find("secret-"), std::string::npos);
}

// Every other test runs without migrations/002: the keys load, each following its plan. Here
// the column is added (twice: idempotent) and decides per key (issue 20).
TEST_F(PostgresKeys, ModeColumnDecidesPerKeyAndIsOptional) {
  Insert("before", "free");
  auto source = StartSource(Options());
  ASSERT_TRUE(source);
  ASSERT_NE(Find(source->Keys(), "before"), nullptr);
  EXPECT_FALSE(Find(source->Keys(), "before")->mode.has_value());

  Sql(ReadMigration("002_api_keys_mode.sql"));
  Sql(ReadMigration("002_api_keys_mode.sql"));
  EXPECT_THROW(Insert("bad", "free", ", mode", ", 'loud'"), std::runtime_error);
  Insert("internal", "free", ", mode", ", 'enforce'");
  Insert("customer", "free", ", mode", ", 'shadow'");
  Sql("UPDATE api_keys SET mode = 'enforce' WHERE key_id = 'before'");
  ASSERT_TRUE(recorder_.WaitForKeys(
      [](const std::vector<KeyConfig>& keys) {
        const KeyConfig* b = Find(keys, "before");
        return Find(keys, "internal") && Find(keys, "customer") && b && b->mode;
      },
      std::chrono::seconds(5)))
      << recorder_.AllLogs();
  const auto keys = recorder_.latest();
  EXPECT_EQ(Find(keys, "internal")->mode, config::Mode::kEnforce);
  EXPECT_EQ(Find(keys, "customer")->mode, config::Mode::kShadow);
  EXPECT_EQ(Find(keys, "before")->mode, config::Mode::kEnforce);
  // The snapshot file keeps the column: a restart while PostgreSQL is down keeps the modes.
  const std::string snapshot = testing::PostgresServer::ReadAll(Options().snapshot_path);
  EXPECT_NE(snapshot.find("\"mode\":\"shadow\""), std::string::npos) << snapshot;
}

TEST_F(PostgresKeys, MigrationRefusesClearKeysAndUnknownStatuses) {
  EXPECT_THROW(Sql("INSERT INTO api_keys (key_sha256, key_id, account_id, plan) "
                   "VALUES ('my-clear-api-key', 'x', 'x', 'free')"),
               std::runtime_error);
  EXPECT_THROW(Insert("y", "free", ", status", ", 'paused'"), std::runtime_error);
  EXPECT_THROW(Insert("z", "free", ", overrides", ", '[1, 2]'"), std::runtime_error);
}

TEST_F(PostgresKeys, InsertedKeyArrivesWithinOneSecond) {
  auto source = StartSource(Options());
  ASSERT_TRUE(source);
  EXPECT_TRUE(source->Keys().empty());

  const auto t0 = SteadyClock::now();
  Insert("new", "team");
  ASSERT_TRUE(
      recorder_.WaitForKeys([](const auto& keys) { return Find(keys, "new") != nullptr; }, 1s));
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - t0).count();
  EXPECT_LT(ms, 1000);
  std::printf("insert -> on_change: %lld ms\n", static_cast<long long>(ms));
  EXPECT_EQ(Find(source->Keys(), "new")->plan, "team");
  EXPECT_GE(source->stats().notifications, 1u);
  EXPECT_EQ(source->stats().loads, 1u);  // by key id, not a full reload
  // The snapshot file follows (after on_change: a revocation is not held up by a disk write).
  EXPECT_TRUE(WaitUntil(
      [&] {
        return testing::PostgresServer::ReadAll(Options().snapshot_path).find(Digest("new")) !=
               std::string::npos;
      },
      1s));
}

TEST_F(PostgresKeys, RevokedKeyIsGoneWithinOneSecond) {
  Insert("a", "free");
  Insert("b", "free");
  Insert("c", "team");
  auto source = StartSource(Options());
  ASSERT_TRUE(source);
  ASSERT_EQ(source->Keys().size(), 3u);

  auto t0 = SteadyClock::now();
  Sql("UPDATE api_keys SET status = 'revoked' WHERE key_id = 'a'");
  ASSERT_TRUE(
      recorder_.WaitForKeys([](const auto& keys) { return Find(keys, "a") == nullptr; }, 1s));
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - t0).count();
  EXPECT_LT(ms, 1000);
  std::printf("revoke -> on_change: %lld ms\n", static_cast<long long>(ms));
  EXPECT_EQ(Ids(source->Keys()), (std::set<std::string>{"b", "c"}));

  Sql("DELETE FROM api_keys WHERE key_id = 'b'");
  ASSERT_TRUE(recorder_.WaitForKeys(
      [](const auto& keys) { return Ids(keys) == std::set<std::string>{"c"}; }, 1s));
  // A renamed key id leaves no stale entry (the trigger sends the old and the new id).
  Sql("UPDATE api_keys SET key_id = 'c2' WHERE key_id = 'c'");
  ASSERT_TRUE(recorder_.WaitForKeys(
      [](const auto& keys) { return Ids(keys) == std::set<std::string>{"c2"}; }, 1s));
  Sql("UPDATE api_keys SET status = 'active' WHERE key_id = 'a'");
  ASSERT_TRUE(recorder_.WaitForKeys(
      [](const auto& keys) {
        return Ids(keys) == std::set<std::string>{"a", "c2"};
      },
      1s));
  Sql("TRUNCATE api_keys");
  ASSERT_TRUE(recorder_.WaitForKeys([](const auto& keys) { return keys.empty(); }, 1s));
}

TEST_F(PostgresKeys, ResyncTimerCatchesChangesMissedByNotify) {
  auto o = Options();
  o.resync_seconds = 1;
  auto source = StartSource(o);
  ASSERT_TRUE(source);
  Sql("ALTER TABLE api_keys DISABLE TRIGGER tollgate_api_keys_notify");
  Insert("quiet", "free");
  ASSERT_TRUE(recorder_.WaitForKeys([](const auto& keys) { return Find(keys, "quiet") != nullptr; },
                                    2500ms));
  EXPECT_EQ(source->stats().notifications, 0u);
  EXPECT_GE(source->stats().loads, 2u);
}

TEST_F(PostgresKeys, KeepsServingWhilePostgresIsDownAndResyncsWhenItIsBack) {
  Insert("a", "free");
  Insert("b", "team");
  auto source = StartSource(Options());
  ASSERT_TRUE(source);
  const auto before = source->Keys();

  server_->Stop();
  ASSERT_TRUE(
      WaitUntil([&] { return !source->stats().connected && source->stats().errors >= 3; }, 5s))
      << "errors: " << source->stats().errors;
  EXPECT_EQ(Ids(source->Keys()), (std::set<std::string>{"a", "b"}));  // still serving
  EXPECT_GE(recorder_.CountLogs({"lost PostgreSQL"}), 1);

  // Rows change while the source cannot see the server (it runs on another port meanwhile).
  const int elsewhere = testing::FreePort();
  server_->Start(elsewhere);
  Sql("UPDATE api_keys SET status = 'revoked' WHERE key_id = 'a'");
  Insert("c", "team");
  server_->Stop();
  EXPECT_FALSE(source->stats().connected);
  EXPECT_EQ(Ids(source->Keys()), (std::set<std::string>{"a", "b"}));

  const uint64_t loads = source->stats().loads;
  server_->Start();  // back on its own port
  ASSERT_TRUE(recorder_.WaitForKeys(
      [](const auto& keys) {
        return Ids(keys) == std::set<std::string>{"b", "c"};
      },
      5s))
      << recorder_.AllLogs();
  EXPECT_TRUE(source->stats().connected);
  EXPECT_EQ(source->stats().reconnects, 1u);
  EXPECT_GT(source->stats().loads, loads);
  EXPECT_GE(recorder_.CountLogs({"PostgreSQL connected; resyncing api keys"}), 1);
  EXPECT_TRUE(WaitUntil(
      [&] {
        return testing::PostgresServer::ReadAll(Options().snapshot_path).find(Digest("c")) !=
               std::string::npos;
      },
      1s));

  // And NOTIFY works on the new connection.
  Insert("d", "free");
  ASSERT_TRUE(
      recorder_.WaitForKeys([](const auto& keys) { return Find(keys, "d") != nullptr; }, 1s));
}

TEST_F(PostgresKeys, HungServerIsDroppedAtTheQueryDeadline) {
  auto o = Options();
  o.resync_seconds = 1;
  o.query_timeout_ms = 300;
  auto source = StartSource(o);
  ASSERT_TRUE(source);
  const std::string backend = server_->Query(
      "SELECT pid FROM pg_stat_activity WHERE application_name = 'tollgate' AND datname = '" + db_ +
      "'");
  ASSERT_FALSE(backend.empty());
  const pid_t pid = std::stoi(backend);
  ::kill(pid, SIGSTOP);  // the connection stays open and never answers
  struct Resume {
    pid_t pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{pid};

  ASSERT_TRUE(
      WaitUntil([&] { return source->stats().reconnects >= 1 && source->stats().connected; }, 5s))
      << recorder_.AllLogs();
  EXPECT_GE(source->stats().errors, 1u);
  EXPECT_GE(recorder_.CountLogs({"no answer within query_timeout_ms"}), 1);
  Insert("after", "free");
  ASSERT_TRUE(
      recorder_.WaitForKeys([](const auto& keys) { return Find(keys, "after") != nullptr; }, 1s));
}

TEST_F(PostgresKeys, StartsFromTheSnapshotFileWhenPostgresIsDown) {
  Insert("a", "team", ", rate_limit_per_minute, rate_limit_burst, overrides",
         ", 30, 10, '{\"burst\": {\"capacity\": 5000, \"refill_per_second\": 0.5}}'");
  Insert("b", "free");
  std::vector<KeyConfig> loaded;
  {
    auto first = StartSource(Options());
    ASSERT_TRUE(first);
    loaded = first->Keys();
  }
  server_->Stop();
  auto source = StartSource(Options());
  ASSERT_TRUE(source);
  EXPECT_TRUE(source->stats().using_snapshot_file);
  EXPECT_FALSE(source->stats().connected);
  EXPECT_GE(source->stats().errors, 1u);
  EXPECT_EQ(recorder_.CountLogs({"serving the keys of the snapshot file"}), 1);
  const auto keys = source->Keys();
  ASSERT_EQ(Ids(keys), Ids(loaded));
  const KeyConfig* a = Find(keys, "a");
  EXPECT_EQ(a->sha256_hex, Digest("a"));
  EXPECT_EQ(a->account, "acct-a");
  EXPECT_EQ(a->rate_limit_per_minute, 30);
  EXPECT_EQ(a->rate_limit_burst, 10);
  ASSERT_EQ(a->overrides.size(), 1u);
  EXPECT_EQ(a->overrides[0].spec.capacity, 5000);
  EXPECT_EQ(a->overrides[0].spec.refill, core::Rate::Parse("0.5", 1).value());

  // PostgreSQL back: the source switches to it without a restart.
  server_->Start();
  ASSERT_TRUE(WaitUntil(
      [&] { return source->stats().connected && !source->stats().using_snapshot_file; }, 5s))
      << recorder_.AllLogs();
  EXPECT_EQ(source->stats().reconnects, 0u);  // the first connection, not a re-connection
  Sql("UPDATE api_keys SET status = 'revoked' WHERE key_id = 'a'");
  ASSERT_TRUE(recorder_.WaitForKeys(
      [](const auto& k) { return Ids(k) == std::set<std::string>{"b"}; }, 1s));
  // The rows read from PostgreSQL equal those of the file: switching over changed nothing.
  EXPECT_EQ(recorder_.changes(), 1);
  EXPECT_EQ(source->stats().skipped_rows, 0u);
}

TEST_F(PostgresKeys, MalformedRowsAreSkippedAndCounted) {
  Insert("ok", "free", ", rate_limit_per_minute, rate_limit_burst", ", 30, 0");  // burst 0 is fine
  Insert("negative", "free", ", rate_limit_per_minute", ", -5");
  Insert("zero", "team", ", rate_limit_per_minute", ", 0");
  Insert("gold", "gold", ", rate_limit_per_minute", ", 5");
  Insert("badoverride", "team", ", overrides", ", '{\"nope\": {\"capacity\": 5}}'");
  auto source = StartSource(Options());
  ASSERT_TRUE(source);
  auto keys = source->Keys();
  EXPECT_EQ(Ids(keys), (std::set<std::string>{"ok", "negative", "zero", "gold", "badoverride"}));
  EXPECT_EQ(source->stats().skipped_rows, 4u);
  EXPECT_EQ(recorder_.CountLogs({"malformed api_keys row", "\"key_id\":\"negative\"",
                                 "rate_limit_per_minute: must be >= 1, got -5"}),
            1)
      << recorder_.AllLogs();
  EXPECT_EQ(
      recorder_.CountLogs({"\"key_id\":\"zero\"", "rate_limit_per_minute: must be >= 1, got 0"}),
      1);
  EXPECT_EQ(recorder_.CountLogs({"\"key_id\":\"gold\"", "unknown plan 'gold'"}), 1);
  EXPECT_EQ(recorder_.CountLogs({"\"key_id\":\"badoverride\"",
                                 "overrides.nope: plan 'team' has no limit named 'nope'"}),
            1);
  EXPECT_FALSE(Find(keys, "negative")->rate_limit_per_minute.has_value());
  EXPECT_FALSE(Find(keys, "gold")->rate_limit_per_minute.has_value());
  EXPECT_EQ(Find(keys, "badoverride")->rate_limit_per_minute, 600);  // the rest of the row stands
  EXPECT_TRUE(Find(keys, "badoverride")->overrides.empty());

  // The policy builds: the unknown plan is the strictest plan, bad numbers the plan's limit.
  config::Config c = BaseConfig();
  c.keys = keys;
  auto policy = Policy::Build(c);
  ASSERT_TRUE(policy.ok()) << policy.error();
  const auto now = core::Instant::FromUnixSeconds(1'800'000'000);
  EXPECT_EQ((*policy)->FindById("gold")->plan->name, "free");
  EXPECT_EQ((*policy)->FindById("gold")->LimitAt(1, now).PolicyQuota(), 60);
  EXPECT_EQ((*policy)->FindById("negative")->LimitAt(1, now).PolicyQuota(), 60);
  EXPECT_EQ((*policy)->FindById("zero")->LimitAt(1, now).PolicyQuota(), 600);
  EXPECT_EQ((*policy)->FindById("ok")->LimitAt(1, now).PolicyQuota(), 30);

  // At runtime too; an unchanged malformed row is not counted again by a resync.
  Insert("late", "free", ", rate_limit_burst", ", -1");
  ASSERT_TRUE(recorder_.WaitForKeys([](const auto& k) { return Find(k, "late") != nullptr; }, 1s));
  EXPECT_EQ(source->stats().skipped_rows, 5u);
  EXPECT_EQ(recorder_.CountLogs({"\"key_id\":\"late\"", "rate_limit_burst: must be >= 0, got -1"}),
            1);
  EXPECT_TRUE(source->stats().connected);
}

TEST_F(PostgresKeys, SetPlansChecksTheRowsAgain) {
  Insert("g", "gold", ", rate_limit_per_minute, rate_limit_burst", ", 7, 3");
  auto source = StartSource(Options());
  ASSERT_TRUE(source);
  EXPECT_FALSE(source->Keys().at(0).rate_limit_per_minute.has_value());
  auto plans = BaseConfig().plans;
  plans.push_back(plans[1]);
  plans.back().name = "gold";
  source->SetPlans(plans);
  ASSERT_TRUE(recorder_.WaitForKeys(
      [](const auto& keys) { return keys.size() == 1 && keys[0].rate_limit_per_minute == 7; }, 1s));
}

TEST_F(PostgresKeys, FromKeyLimitAllowsPerMinutePlusBurstInAnySixtySeconds) {
  Insert("custom", "team", ", rate_limit_per_minute, rate_limit_burst", ", 30, 10");
  Insert("default", "team");
  auto source = StartSource(Options());
  ASSERT_TRUE(source);
  config::Config c = BaseConfig();
  c.keys = source->Keys();
  c.keys.push_back({.sha256_hex = Digest("yaml"), .id = "yaml", .account = "yaml", .plan = "team"});
  auto policy = Policy::Build(c);
  ASSERT_TRUE(policy.ok()) << policy.error();

  const auto t0 = core::Instant::FromUnixSeconds(1'800'000'000);
  const Key* custom = (*policy)->FindById("custom");
  ASSERT_NE(custom, nullptr);
  const core::Limit& minute = custom->LimitAt(1, t0);
  EXPECT_EQ(minute.algorithm(), core::Algorithm::kSlidingWindowLog);
  EXPECT_EQ(minute.PolicyQuota(), 40);  // 30 + 10
  EXPECT_EQ(minute.PolicyWindowSeconds(t0), 60);
  EXPECT_EQ(custom->LimitAt(0, t0).PolicyQuota(), 200);  // the plan's other limits stay
  EXPECT_EQ((*policy)->FindById("default")->LimitAt(1, t0).PolicyQuota(), 700);  // 600 + 100
  EXPECT_EQ((*policy)->FindById("yaml")->LimitAt(1, t0).PolicyQuota(), 600);     // the plan's limit

  // 40 requests spread over a minute pass, the 41st does not; the first leaves after 60 s.
  core::LogState log;
  for (int i = 0; i < 40; ++i) {
    EXPECT_TRUE(minute.Evaluate(log, 1, t0 + core::Duration::Millis(i * 1000)).allowed) << i;
  }
  EXPECT_FALSE(minute.Evaluate(log, 1, t0 + core::Duration::Seconds(59)).allowed);
  EXPECT_TRUE(minute.Evaluate(log, 1, t0 + core::Duration::Seconds(60) + core::Duration::Micros(1))
                  .allowed);
}

// Without a server.

TEST(PostgresKeysDown, NoSnapshotFileIsAClearError) {
  TempDir dir;
  const int port = testing::FreePort();  // nothing listens there
  PostgresKeySourceOptions o;
  o.url = "postgres://app:hunter2@127.0.0.1:" + std::to_string(port) + "/keys";
  o.plans = BaseConfig().plans;
  o.snapshot_path = dir.File("missing.json");
  auto s = PostgresKeySource::Start(o, nullptr, [](const std::string&) {});
  ASSERT_FALSE(s.ok());
  const std::string prefix =
      "cannot load API keys: PostgreSQL at postgres://app@127.0.0.1:" + std::to_string(port) +
      "/keys failed (";
  EXPECT_EQ(s.error().rfind(prefix, 0), 0u) << s.error();
  EXPECT_NE(s.error().find("), and there is no snapshot file at '" + o.snapshot_path + "'"),
            std::string::npos)
      << s.error();
  EXPECT_EQ(s.error().find("hunter2"), std::string::npos);  // never the password

  o.snapshot_path = "";
  s = PostgresKeySource::Start(o, nullptr, [](const std::string&) {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("no snapshot file is configured"), std::string::npos) << s.error();

  o.snapshot_path = dir.File("broken.json");
  std::ofstream(o.snapshot_path) << "{\"version\": 1, \"keys\": [";
  s = PostgresKeySource::Start(o, nullptr, [](const std::string&) {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(
      s.error().find("the snapshot file '" + o.snapshot_path + "' cannot be used: not valid JSON"),
      std::string::npos)
      << s.error();
}

TEST(PostgresKeysDown, RefusesBadOptions) {
  PostgresKeySourceOptions o;
  o.plans = BaseConfig().plans;
  EXPECT_EQ(PostgresKeySource::Start(o, nullptr, nullptr).error(),
            "postgres key source: url: required");
  o.url = "postgres://[broken";
  EXPECT_NE(
      PostgresKeySource::Start(o, nullptr, nullptr).error().find("postgres key source: url: "),
      std::string::npos);
  o.url = "postgres://127.0.0.1/x";
  o.plans.clear();
  EXPECT_EQ(PostgresKeySource::Start(o, nullptr, nullptr).error(),
            "postgres key source: plans: at least one plan is required");
}

TEST(PostgresKeysDown, SnapshotRowsAreCheckedLikeTableRows) {
  TempDir dir;
  PostgresKeySourceOptions o;
  o.url = "postgres://127.0.0.1:" + std::to_string(testing::FreePort()) + "/keys";
  o.plans = BaseConfig().plans;
  o.snapshot_path = dir.File("keys.json");
  std::ofstream(o.snapshot_path)
      << R"({"version": 1, "keys": [
{"key_sha256": ")"
      << Digest("good")
      << R"(", "key_id": "good", "account_id": "a", "plan": "team", "rate_limit_per_minute": 5, "rate_limit_burst": 1, "overrides": {"burst": {"capacity": 50}}},
{"key_sha256": "not-a-digest", "key_id": "nodigest", "account_id": "a", "plan": "team", "rate_limit_per_minute": 5, "rate_limit_burst": 1},
{"key_sha256": ")"
      << Digest("neg")
      << R"(", "key_id": "neg", "account_id": "a", "plan": "team", "rate_limit_per_minute": -5, "rate_limit_burst": 1},
{"key_sha256": ")"
      << Digest("text")
      << R"(", "key_id": "text", "account_id": "a", "plan": "team", "rate_limit_per_minute": "many", "rate_limit_burst": 1},
{"key_sha256": ")"
      << Digest("gold")
      << R"(", "key_id": "gold", "account_id": "a", "plan": "gold", "rate_limit_per_minute": 5, "rate_limit_burst": 1},
{"key_sha256": ")"
      << Digest("ov")
      << R"(", "key_id": "ov", "account_id": "a", "plan": "team", "rate_limit_per_minute": 5, "rate_limit_burst": 1, "overrides": {"burst": {"capacity": -1}}},
{"key_sha256": ")"
      << Digest("ov2")
      << R"(", "key_id": "ov2", "account_id": "a", "plan": "team", "rate_limit_per_minute": 5, "rate_limit_burst": 1, "overrides": {"burst": {"capacity": [1]}}},
{"key_sha256": ")"
      << Digest("other")
      << R"(", "key_id": "good", "account_id": "a", "plan": "team", "rate_limit_per_minute": 5, "rate_limit_burst": 1},
7
]})";
  Recorder recorder;
  auto s = PostgresKeySource::Start(o, recorder.OnChange(), recorder.OnLog());
  ASSERT_TRUE(s.ok()) << s.error();
  const auto keys = (*s)->Keys();
  EXPECT_EQ(Ids(keys), (std::set<std::string>{"good", "neg", "text", "gold", "ov", "ov2"}));
  EXPECT_EQ((*s)->stats().skipped_rows, 8u) << recorder.AllLogs();
  EXPECT_EQ(Find(keys, "good")->overrides.at(0).spec.capacity, 50);
  EXPECT_EQ(Find(keys, "good")->sha256_hex, Digest("good"));
  EXPECT_FALSE(Find(keys, "neg")->rate_limit_per_minute.has_value());
  EXPECT_FALSE(Find(keys, "text")->rate_limit_per_minute.has_value());
  EXPECT_EQ(Find(keys, "ov")->rate_limit_per_minute, 5);
  EXPECT_TRUE(Find(keys, "ov")->overrides.empty());
  EXPECT_EQ(recorder.CountLogs({"\"key_id\":\"nodigest\"", "key_sha256: must be 64 hex digits"}),
            1);
  EXPECT_EQ(recorder.CountLogs(
                {"\"key_id\":\"text\"", "rate_limit_per_minute: must be an integer, got 'many'"}),
            1);
  EXPECT_EQ(
      recorder.CountLogs({"\"key_id\":\"ov\"", "overrides.burst.capacity: must be >= 1, got -1"}),
      1)
      << recorder.AllLogs();
  EXPECT_EQ(recorder.CountLogs(
                {"\"key_id\":\"ov2\"", "overrides.burst.capacity: must be a number or a string"}),
            1);
  EXPECT_EQ(recorder.CountLogs({"\"key_id\":\"good\"", "key_id: duplicate"}), 1);
  EXPECT_EQ(recorder.CountLogs({"\"key_id\":\"\"", "key_id: must not be empty"}), 1);
}

}  // namespace
}  // namespace tollgate::policy
