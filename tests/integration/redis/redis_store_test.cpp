#include <tollgate/store/redis_store.hpp>
#include <tollgate/usage/redis_backend.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "support/apply_sync.hpp"
#include "support/limits.hpp"
#include "support/redis_server.hpp"
#include "support/tls_certs.hpp"
#include "support/wait.hpp"

namespace tollgate::store {
namespace {

using core::Algorithm;
using core::Decision;
using core::Limit;

using testing::ApplySync;
using testing::Bucket;
using testing::WaitUntil;

std::unique_ptr<RedisStore> Make(const testing::RedisServer& s, int timeout_ms = 200) {
  auto r = RedisStore::Create({.url = s.url(),
                               .prefix = "t",
                               .timeout_ms = timeout_ms,
                               .connect_timeout_ms = 200,
                               .breaker_failures = 3,
                               .breaker_open_ms = 100});
  EXPECT_TRUE(r.ok()) << r.error();
  return std::move(r).value();
}

TEST(RedisStore, RejectsBadUrls) {
  EXPECT_FALSE(RedisStore::Create({.url = "http://x:1"}).ok());
  EXPECT_TRUE(RedisStore::Create({.url = "rediss://x:1"}).ok());  // the system's CAs
  EXPECT_TRUE(RedisStore::Create({.url = "rediss-cluster://a:1,b:2"}).ok());
  EXPECT_FALSE(RedisStore::Create({.url = "redis://nohostport"}).ok());
  EXPECT_FALSE(RedisStore::Create({.url = "redis://h:1/x"}).ok());
  EXPECT_TRUE(RedisStore::Create({.url = "redis://user:pw@h:1/3"}).ok());
  EXPECT_TRUE(RedisStore::Create({.url = "redis-cluster://a:1,b:2"}).ok());
}

std::unique_ptr<RedisStore> MakeTls(const std::string& url, const std::string& ca,
                                    const std::string& cert = "", const std::string& key = "",
                                    int timeout_ms = 2000) {
  auto r = RedisStore::Create({.url = url,
                               .prefix = "tls",
                               .timeout_ms = timeout_ms,
                               .connect_timeout_ms = 1000,
                               .breaker_failures = 3,
                               .breaker_open_ms = 100,
                               .tls_ca_file = ca,
                               .tls_cert_file = cert,
                               .tls_key_file = key});
  EXPECT_TRUE(r.ok()) << r.error();
  return std::move(r).value();
}

// A redis-server speaking TLS with throwaway certificates (on a second port; its plain port
// serves redis-cli), and one token-bucket check to decide against it.
struct TlsRedis {
  explicit TlsRedis(bool client_certificates, int64_t capacity = 2, const char* rate = "0.001")
      : server(certs.RedisArgs(port, client_certificates)), burst(Bucket(capacity, rate)) {}
  ApplyResult Decide(RedisStore& store, std::string_view scope = "k") {
    return ApplySync(store, Batch{.scope = scope, .checks = checks}, d);
  }

  testing::TlsCerts certs;
  const int port = testing::FreePort();
  testing::RedisServer server;
  const std::string url = "rediss://127.0.0.1:" + std::to_string(port);
  const Limit burst;
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  std::vector<Decision> d = std::vector<Decision>(1);
};

// rediss:// decides over TLS, and only with a server whose certificate the CA signed for the
// host named in the URL.
TEST(RedisStore, TlsDecidesWithAVerifiedServerOnly) {
  TlsRedis tls(false);
  auto store = MakeTls(tls.url, tls.certs.File("ca.crt"));
  for (int i = 0; i < 3; ++i) {
    const ApplyResult r = tls.Decide(*store);
    ASSERT_EQ(r.error, StoreErrc::kOk) << r.message << " " << store->LastError();
    EXPECT_EQ(tls.d[0].allowed, i < 2) << i;
  }
  EXPECT_EQ(tls.server.Cli("EXISTS tls:{k}:burst:tb"), "1");
  EXPECT_EQ(store->LastError(), "");
  // Signed by another CA; issued for 127.0.0.1, not for localhost.
  for (const auto& [u, ca] :
       {std::pair{tls.url, tls.certs.File("other.crt")},
        std::pair{"rediss://localhost:" + std::to_string(tls.port), tls.certs.File("ca.crt")}}) {
    auto untrusted = MakeTls(u, ca);
    const ApplyResult r = tls.Decide(*untrusted, "k2");
    EXPECT_EQ(r.error, StoreErrc::kUnavailable) << u;
    EXPECT_NE(untrusted->LastError().find("certificate verify failed"), std::string::npos)
        << untrusted->LastError();
  }
  EXPECT_EQ(tls.server.Cli("EXISTS tls:{k2}:burst:tb"), "0");
}

// A TLS connection that breaks (Redis restarted; Redis stalled, so the breaker drops the
// connection with its operations pending) is replaced by a new one, with a new handshake.
TEST(RedisStore, TlsReconnectsAfterRedisRestartsOrStalls) {
  TlsRedis tls(false, 100, "1");
  auto store = MakeTls(tls.url, tls.certs.File("ca.crt"), "", "", 200);
  ASSERT_EQ(tls.Decide(*store).error, StoreErrc::kOk) << store->LastError();
  tls.server.Stop();
  EXPECT_NE(tls.Decide(*store).error, StoreErrc::kOk);
  tls.server.Start();  // same ports, same certificate
  auto recovers = [&] {
    return WaitUntil([&] { return tls.Decide(*store).error == StoreErrc::kOk; },
                     std::chrono::seconds(5), std::chrono::milliseconds(50));
  };
  EXPECT_TRUE(recovers()) << store->LastError();
  const uint64_t reconnects = store->stats().reconnects.load();
  EXPECT_GE(reconnects, 1u);
  tls.server.Pause();
  for (int i = 0; i < 4; ++i) EXPECT_NE(tls.Decide(*store).error, StoreErrc::kOk);
  tls.server.Resume();
  EXPECT_TRUE(recovers()) << store->LastError();
  EXPECT_GT(store->stats().reconnects.load(), reconnects);  // the stalled connection was dropped
}

TEST(RedisStore, TlsPresentsAClientCertificateWhenTheServerAsksForOne) {
  TlsRedis tls(true);
  auto anonymous = MakeTls(tls.url, tls.certs.File("ca.crt"));
  EXPECT_NE(tls.Decide(*anonymous).error, StoreErrc::kOk);
  EXPECT_NE(anonymous->LastError(), "");
  auto known = MakeTls(tls.url, tls.certs.File("ca.crt"), tls.certs.File("client.crt"),
                       tls.certs.File("client.key"));
  const ApplyResult r = tls.Decide(*known);
  EXPECT_EQ(r.error, StoreErrc::kOk) << r.message << " " << known->LastError();
  EXPECT_TRUE(tls.d[0].allowed);
}

TEST(RedisStore, TlsSettingsAreCheckedWhenTheStoreIsMade) {
  testing::TlsCerts certs;
  auto missing =
      RedisStore::Create({.url = "rediss://127.0.0.1:1", .tls_ca_file = certs.File("none.crt")});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("store.tls.ca_file"), std::string::npos) << missing.error();
  EXPECT_FALSE(
      RedisStore::Create({.url = "redis://127.0.0.1:1", .tls_ca_file = certs.File("ca.crt")}).ok());
  EXPECT_FALSE(
      RedisStore::Create({.url = "rediss://127.0.0.1:1", .tls_cert_file = certs.File("client.crt")})
          .ok());
  auto wrong_key = RedisStore::Create({.url = "rediss://127.0.0.1:1",
                                       .tls_cert_file = certs.File("client.crt"),
                                       .tls_key_file = certs.File("server.key")});
  ASSERT_FALSE(wrong_key.ok());
  EXPECT_NE(wrong_key.error().find("store.tls.key_file"), std::string::npos) << wrong_key.error();
}

TEST(RedisStore, TwoReplicasShareOneExactBudget) {
  testing::RedisServer server;
  auto a = Make(server, 2000);
  auto b = Make(server, 2000);
  const Limit burst = Bucket(300, "0.001");
  const Limit daily = Limit::Create({.algorithm = Algorithm::kQuota, .ceiling = 250}).value();
  std::atomic<int> accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      RedisStore& store = t % 2 ? *a : *b;
      const std::vector<Check> checks = {{"burst", &burst, 1}, {"daily", &daily, 1}};
      std::vector<Decision> d(2);
      for (int i = 0; i < 250; ++i) {
        const ApplyResult r = ApplySync(store, Batch{.scope = "key:shared", .checks = checks}, d);
        ASSERT_EQ(r.error, StoreErrc::kOk) << r.message;
        if (r.committed) accepted.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(accepted.load(), 250);  // the daily ceiling, exactly, across both replicas
}

TEST(RedisStore, LanesDecideOnTheirOwnLoopsAndShareOneBudget) {
  testing::RedisServer server;
  auto store = Make(server, 2000);
  const Limit daily = Limit::Create({.algorithm = Algorithm::kQuota, .ceiling = 150}).value();
  const std::vector<Check> checks = {{"daily", &daily, 1}};
  boost::asio::io_context loops[2];
  const size_t lanes[2] = {store->AddLane(loops[0]), store->AddLane(loops[1])};
  std::atomic<int> accepted{0};
  std::atomic<int> elsewhere{0};  // completions on another thread than the lane's
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      store->EnterLane(lanes[t]);
      const auto self = std::this_thread::get_id();
      int left = 100;
      std::vector<Decision> d(1);
      std::function<void()> next = [&] {
        store->Apply(Batch{.scope = "key:lanes", .checks = checks}, d, [&](ApplyResult r) {
          if (std::this_thread::get_id() != self) elsewhere.fetch_add(1);
          EXPECT_EQ(r.error, StoreErrc::kOk) << r.message;
          if (r.committed) accepted.fetch_add(1);
          if (--left > 0) return next();
          loops[t].stop();
        });
      };
      boost::asio::post(loops[t], next);
      loops[t].run();
    });
  }
  for (auto& t : threads) t.join();
  // The store's own lane, from this thread, on the same budget.
  std::vector<Decision> d(1);
  for (int i = 0; i < 100; ++i) {
    if (ApplySync(*store, Batch{.scope = "key:lanes", .checks = checks}, d).committed)
      accepted.fetch_add(1);
  }
  store->CloseLanes();  // before the loops go
  EXPECT_EQ(elsewhere.load(), 0);
  EXPECT_EQ(accepted.load(), 150);  // the ceiling, exactly, across the three lanes
}

TEST(RedisStore, KeysHaveTtlsAndDisappearAfterTheirWindows) {
  testing::RedisServer server;
  auto store = Make(server, 2000);
  const Limit burst = Bucket(5, "50");  // full again 20 ms after one request
  const Limit window = Limit::Create({.algorithm = Algorithm::kSlidingWindowLog,
                                      .limit = 5,
                                      .window = core::Duration::Millis(100)})
                           .value();
  std::vector<Decision> d(2);
  for (int i = 0; i < 2000; ++i) {
    const std::string scope = "key:" + std::to_string(i);
    const std::vector<Check> checks = {{"burst", &burst, 1}, {"minute", &window, 1}};
    ASSERT_TRUE(ApplySync(*store, Batch{.scope = scope, .checks = checks}, d).committed);
  }
  EXPECT_GE(std::stoi(server.Cli("DBSIZE")), 1);
  EXPECT_TRUE(WaitUntil([&] { return server.Cli("DBSIZE") == "0"; }, std::chrono::seconds(5),
                        std::chrono::milliseconds(50)))
      << server.Cli("DBSIZE");
}

TEST(RedisStore, ScriptCacheFlushIsHandled) {
  testing::RedisServer server;
  auto store = Make(server, 2000);
  const Limit burst = Bucket(100, "1");
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  std::vector<Decision> d(1);
  ASSERT_EQ(ApplySync(*store, Batch{.scope = "k", .checks = checks}, d).error, StoreErrc::kOk);
  server.Cli("SCRIPT FLUSH");
  for (int i = 0; i < 3; ++i) {
    const ApplyResult r = ApplySync(*store, Batch{.scope = "k", .checks = checks}, d);
    ASSERT_EQ(r.error, StoreErrc::kOk) << r.message;
    EXPECT_EQ(d[0].remaining, 98 - i);
  }
  EXPECT_GE(store->stats().noscript.load(), 1u);
}

TEST(RedisStore, DeadRedisFailsFastThenRecoversWithoutRestart) {
  testing::RedisServer server;
  auto store = Make(server);
  const Limit burst = Bucket(100, "1");
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  std::vector<Decision> d(1);
  ASSERT_EQ(ApplySync(*store, Batch{.scope = "k", .checks = checks}, d).error, StoreErrc::kOk);
  server.Stop();
  for (int i = 0; i < 20; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const ApplyResult r = ApplySync(*store, Batch{.scope = "k", .checks = checks}, d);
    EXPECT_NE(r.error, StoreErrc::kOk);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  }
  EXPECT_GE(store->stats().breaker_rejections.load(), 1u);
  server.Start();  // same port, empty: no script cached
  EXPECT_TRUE(WaitUntil(
      [&] {
        return ApplySync(*store, Batch{.scope = "k", .checks = checks}, d).error == StoreErrc::kOk;
      },
      std::chrono::seconds(5), std::chrono::milliseconds(50)));
}

// Decisions waiting for a group while Redis stalls time out like any other, and once Redis
// answers again they are not sent: only the groups already in flight reach Redis.
TEST(RedisStore, GroupedDecisionsThatTimedOutWaitingAreNeverSent) {
  testing::RedisServer server;
  auto r = RedisStore::Create({.url = server.url(),
                               .prefix = "t",
                               .timeout_ms = 50,
                               .connect_timeout_ms = 200,
                               .breaker_failures = 1'000'000});
  ASSERT_TRUE(r.ok()) << r.error();
  RedisStore& store = **r;
  const Limit burst = Bucket(1000, "0.001");
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  std::vector<Decision> d(1);
  // Until one decision makes its 50 ms (the first connects and loads the script).
  auto decide = [&] {
    for (int i = 0; i < 50; ++i) {
      if (ApplySync(store, Batch{.scope = "k", .checks = checks}, d).error == StoreErrc::kOk)
        return true;
    }
    return false;
  };
  ASSERT_TRUE(decide());
  const int64_t remaining_before = d[0].remaining;
  const uint64_t scripts_before = store.stats().scripts.load();
  const uint64_t timeouts_before = store.stats().timeouts.load();
  server.Pause();
  constexpr int kWaiting = 400;  // more than two full batches (2 x 128)
  std::vector<Decision> out(kWaiting);
  std::vector<std::promise<ApplyResult>> replies(kWaiting);
  for (int i = 0; i < kWaiting; ++i) {
    store.Apply(Batch{.scope = "k", .checks = checks}, {&out[i], 1},
                [&replies, i](ApplyResult&& res) { replies[i].set_value(std::move(res)); });
  }
  for (auto& reply : replies) EXPECT_EQ(reply.get_future().get().error, StoreErrc::kTimeout);
  EXPECT_EQ(store.stats().timeouts.load() - timeouts_before, static_cast<uint64_t>(kWaiting));
  const uint64_t sent = store.stats().scripts.load() - scripts_before;
  EXPECT_LE(sent, 2u);  // kBatchesInFlight, of one group each here
  server.Resume();
  // Later decisions go out after the stalled groups' replies: they see those debits only (and
  // their own, if one of them misses its deadline on a slow machine but reaches Redis).
  const uint64_t scripts_resumed = store.stats().scripts.load();
  ASSERT_TRUE(decide());
  const int64_t after = static_cast<int64_t>(store.stats().scripts.load() - scripts_resumed);
  EXPECT_GE(d[0].remaining, remaining_before - 2 * 128 - after);  // at most two batches debited
}

// Once the open circuit's time is up, one call probes; the others keep failing at once, so a
// Redis that swallows requests costs one timeout per breaker_open_ms, not one per request.
TEST(RedisStore, HalfOpenBreakerSendsOneProbe) {
  testing::RedisServer server;
  auto store = Make(server, 50);  // opens after 3 failures, for 100 ms
  const Limit burst = Bucket(100, "1");
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  std::vector<Decision> d(1);
  ASSERT_EQ(ApplySync(*store, Batch{.scope = "k", .checks = checks}, d).error, StoreErrc::kOk);
  server.Pause();
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(ApplySync(*store, Batch{.scope = "k", .checks = checks}, d).error,
              StoreErrc::kTimeout);
  ASSERT_EQ(store->stats().breaker_open.load(), 1);
  // Pacing, not a wait for a condition: the circuit's open time (100 ms) must pass, and nothing
  // can be polled for it without sending the very call whose probing is under test.
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const uint64_t timeouts = store->stats().timeouts.load();
  const uint64_t rejections = store->stats().breaker_rejections.load();
  constexpr int kCalls = 20;
  std::vector<Decision> out(kCalls);
  std::vector<std::promise<ApplyResult>> replies(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    store->Apply(Batch{.scope = "k", .checks = checks}, {&out[i], 1},
                 [&replies, i](ApplyResult&& res) { replies[i].set_value(std::move(res)); });
  }
  for (auto& reply : replies) EXPECT_NE(reply.get_future().get().error, StoreErrc::kOk);
  server.Resume();
  EXPECT_EQ(store->stats().timeouts.load() - timeouts, 1u);
  EXPECT_EQ(store->stats().breaker_rejections.load() - rejections,
            static_cast<uint64_t>(kCalls - 1));
}

// A refused AUTH backs off like any failed connection (it used to start over at 50 ms, since the
// backoff was reset when the TCP connection opened, before AUTH's answer).
TEST(RedisStore, RefusedPasswordBacksOff) {
  testing::RedisServer server;
  server.Cli("CONFIG SET requirepass right");
  auto r = RedisStore::Create({.url = "redis://:wrong@127.0.0.1:" + std::to_string(server.port()),
                               .prefix = "t",
                               .timeout_ms = 50,
                               .breaker_failures = 1'000'000});
  ASSERT_TRUE(r.ok()) << r.error();
  RedisStore& store = **r;
  const Limit burst = Bucket(100, "1");
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  std::vector<Decision> d(1);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < end) {
    EXPECT_NE(ApplySync(store, Batch{.scope = "k", .checks = checks}, d).error, StoreErrc::kOk);
    // Pacing: a call every 10 ms for 1.5 s; what is counted is how many reconnects they cause.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(store.LastError().find("AUTH"), std::string::npos) << store.LastError();
  // 50, 100, 200, 400, 800 ms: about 5 attempts in 1.5 s, where a fixed 50 ms made about 25.
  EXPECT_LE(store.stats().reconnects.load(), 8u);
  EXPECT_GE(store.stats().reconnects.load(), 3u);
}

// The breaker opening on timeouts drops live connections, not one still in its handshake: a
// slow TLS handshake keeps its own deadline (connect_timeout_ms).
TEST(RedisStore, BreakerLeavesAConnectionInItsHandshake) {
  // A listener that never answers: TCP connects (the kernel's backlog), TLS never completes.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  testing::TlsCerts certs;
  auto r = RedisStore::Create({.url = "rediss://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)),
                               .prefix = "t",
                               .timeout_ms = 20,
                               .connect_timeout_ms = 3000,
                               .breaker_failures = 3,
                               .breaker_open_ms = 100,
                               .tls_ca_file = certs.File("ca.crt")});
  ASSERT_TRUE(r.ok()) << r.error();
  RedisStore& store = **r;
  const Limit burst = Bucket(100, "1");
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  std::vector<Decision> d(1);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(ApplySync(store, Batch{.scope = "k", .checks = checks}, d).error,
              StoreErrc::kTimeout);
  EXPECT_EQ(store.stats().breaker_open.load(), 1);
  EXPECT_EQ(store.stats().reconnects.load(), 0u);  // the handshake goes on
  ::close(fd);
}

TEST(RedisStore, StalledRedisTripsTheDeadline) {
  testing::RedisServer server;
  auto store = Make(server, 20);
  const Limit burst = Bucket(100, "1");
  const std::vector<Check> checks = {{"burst", &burst, 1}};
  std::vector<Decision> d(1);
  ASSERT_EQ(ApplySync(*store, Batch{.scope = "k", .checks = checks}, d).error, StoreErrc::kOk);
  server.Pause();
  const auto t0 = std::chrono::steady_clock::now();
  const ApplyResult r = ApplySync(*store, Batch{.scope = "k", .checks = checks}, d);
  const auto took = std::chrono::steady_clock::now() - t0;
  server.Resume();
  EXPECT_EQ(r.error, StoreErrc::kTimeout);
  EXPECT_LT(took, std::chrono::milliseconds(1000));
  EXPECT_GE(store->stats().timeouts.load(), 1u);
}

}  // namespace
}  // namespace tollgate::store

namespace tollgate::store {
namespace {

using usage::kOutcomeNames;
using usage::kOutcomes;
using usage::Outcome;
using usage::RedisUsageBackend;
using usage::UsageCounts;
using usage::UsageDeltas;
using usage::UsageKey;
using usage::UsageRows;

using testing::WaitUntil;

// How many times Redis ran `command` (lower case), from INFO commandstats.
int64_t CommandCalls(testing::RedisServer& server, const std::string& command) {
  const std::string info = server.Cli("INFO commandstats");
  const std::string field = "cmdstat_" + command + ":calls=";
  const size_t at = info.find(field);
  return at == std::string::npos ? 0 : std::stoll(info.substr(at + field.size()));
}

// Waits (bounded) until Redis has answered every command `store` sent before this call, and
// their reply handlers have run: a PING on the same connection, whose reply comes after theirs.
// Then counts of what Redis ran are final, where a fixed wait only made them likely.
bool AllAnswered(RedisStore& store) {
  auto answered = std::make_shared<std::promise<void>>();
  auto done = answered->get_future();
  store.Command({"PING"}, 1, [answered](core::Result<RedisValue>) { answered->set_value(); });
  return done.wait_for(std::chrono::seconds(2)) == std::future_status::ready;
}

TEST(RedisUsage, CountsSurviveTheProcessAndAddUpAcrossReplicas) {
  testing::RedisServer server;
  UsageRows first;
  first[UsageKey{"2026-11-29", "acme", "k1"}].requests[0] = 2;
  first[UsageKey{"2026-11-29", "acme", "k1"}].cost[0] = 6;
  first[UsageKey{"2026-11-29", "beta", "k2"}].requests[3] = 1;
  {
    auto a = Make(server, 2000);
    RedisUsageBackend(*a, "u").Add(UsageDeltas(first.begin(), first.end()));
  }  // this "replica" is gone
  auto b = Make(server, 2000);
  RedisUsageBackend backend(*b, "u");
  backend.Add(UsageDeltas(first.begin(), first.end()));  // a second replica adds the same again
  std::promise<core::Result<UsageRows>> p;
  backend.Read({"2026-11-29"}, "", [&](core::Result<UsageRows> r) { p.set_value(std::move(r)); });
  auto rows = p.get_future().get();
  ASSERT_TRUE(rows.ok()) << rows.error();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((rows->at(UsageKey{"2026-11-29", "acme", "k1"}).cost[0]), 12);
  EXPECT_EQ((rows->at(UsageKey{"2026-11-29", "acme", "k1"}).requests[0]), 4);
  EXPECT_EQ((rows->at(UsageKey{"2026-11-29", "beta", "k2"}).requests[3]), 2);
  EXPECT_EQ((rows->at(UsageKey{"2026-11-29", "beta", "k2"}).cost[3]), 0);
  const std::string ttl = server.Cli("TTL 'u:{usage:acme}:2026-11-29'");
  EXPECT_GT(std::stoll(ttl), 86'400 * 300);
}

// Requests that cost 1 each (the usual route) take one HINCRBY per key and outcome, not two: the
// cost is stored as what it adds to the request count, and read back as their sum.
TEST(RedisUsage, RequestsOfCostOneTakeOneCounterPerOutcome) {
  testing::RedisServer server;
  auto store = Make(server, 2000);
  RedisUsageBackend backend(*store, "u");
  auto hincrby_calls = [&] { return CommandCalls(server, "hincrby"); };
  UsageDeltas rows(2);
  rows[0].first = UsageKey{"2026-11-29", "acme", "k1"};
  rows[0].second.requests = {5, 0, 0, 2};
  rows[0].second.cost = {5, 0, 0, 2};
  rows[1].first = UsageKey{"2026-11-29", "acme", "k2"};
  rows[1].second.requests = {3, 0, 0, 0};
  rows[1].second.cost = {12, 0, 0, 0};  // an export: cost above the request count
  backend.Add(rows);
  ASSERT_TRUE(AllAnswered(*store));  // nothing more arrives
  EXPECT_EQ(hincrby_calls(), 4);     // k1: success, rejected; k2: success and its extra cost
  std::promise<core::Result<UsageRows>> p;
  backend.Read({"2026-11-29"}, "acme",
               [&](core::Result<UsageRows> r) { p.set_value(std::move(r)); });
  auto got = p.get_future().get();
  ASSERT_TRUE(got.ok()) << got.error();
  ASSERT_EQ(got->size(), 2u);
  for (const auto& [key, counts] : rows) {
    EXPECT_EQ(got->at(key).requests, counts.requests) << key.key_id;
    EXPECT_EQ(got->at(key).cost, counts.cost) << key.key_id;
  }
}

// A flush sends HINCRBYs; the hash's TTL and the day's index entry go along until Redis has
// confirmed them once, then no more. One that failed is sent again with the next flush.
TEST(RedisUsage, IndexAndTtlAreSentUntilConfirmedThenNoMore) {
  testing::RedisServer server;
  auto store = Make(server, 2000);
  RedisUsageBackend backend(*store, "u");
  auto sadd_calls = [&] { return CommandCalls(server, "sadd"); };
  const std::string field = std::string("'k1|") + kOutcomeNames[0] + "|requests'";
  auto wait_for = [&](const std::string& key, const std::string& want) {
    WaitUntil([&] { return server.Cli("HGET " + key + " " + field) == want; },
              testing::kDefaultWait, std::chrono::milliseconds(5));
    return server.Cli("HGET " + key + " " + field);
  };
  UsageDeltas rows(1);
  rows[0].first = UsageKey{"2026-11-29", "acme", "k1"};
  rows[0].second.requests[0] = 1;
  backend.Add(rows);
  ASSERT_EQ(wait_for("'u:{usage:acme}:2026-11-29'", "1"), "1");
  ASSERT_TRUE(AllAnswered(*store));  // the EXPIREs and SADD after it: confirmed
  for (int i = 0; i < 3; ++i) backend.Add(rows);
  ASSERT_EQ(wait_for("'u:{usage:acme}:2026-11-29'", "4"), "4");
  EXPECT_EQ(sadd_calls(), 1);
  EXPECT_GT(std::stoll(server.Cli("TTL 'u:{usage:acme}:2026-11-29'")), 86'400 * 300);
  EXPECT_EQ(server.Cli("SMEMBERS u:usage:2026-11-29"), "acme");

  // The next day's index is not a set: SADD fails, so every flush sends it again.
  server.Cli("SET u:usage:2026-11-30 not-a-set");
  UsageDeltas next(1);
  next[0].first = UsageKey{"2026-11-30", "acme", "k1"};
  next[0].second.requests[0] = 1;
  backend.Add(next);
  ASSERT_EQ(wait_for("'u:{usage:acme}:2026-11-30'", "1"), "1");
  ASSERT_TRUE(AllAnswered(*store));  // the failed SADD: not confirmed
  backend.Add(next);
  ASSERT_EQ(wait_for("'u:{usage:acme}:2026-11-30'", "2"), "2");
  ASSERT_TRUE(AllAnswered(*store));
  EXPECT_EQ(sadd_calls(), 3);
  EXPECT_GE(store->stats().command_errors.load(), 2u);
  EXPECT_EQ(store->stats().errors.load(), 0u);  // decisions' failures only
}

// Redis down: counts that never reach it are kept and go with a later flush once it is back,
// and the index entry and TTL are sent again (a restart without persistence lost them).
TEST(RedisUsage, CountsSentWhileRedisIsDownArriveWhenItIsBack) {
  testing::RedisServer server;
  auto store = Make(server, 2000);
  RedisUsageBackend backend(*store, "u");
  const std::string key = "'u:{usage:acme}:2026-11-29'";
  const std::string field = std::string("'k1|") + kOutcomeNames[0] + "|requests'";
  auto rows = [](int64_t n) {
    UsageDeltas d(1);
    d[0].first = UsageKey{"2026-11-29", "acme", "k1"};
    d[0].second.requests[0] = n;
    return d;
  };
  backend.Add(rows(1));
  ASSERT_TRUE(WaitUntil([&] { return server.Cli("HGET " + key + " " + field) == "1"; },
                        testing::kDefaultWait, std::chrono::milliseconds(5)))
      << server.Cli("HGET " + key + " " + field);
  const uint64_t reconnects = store->stats().reconnects.load();
  server.Stop();
  // The first flush after the crash may be written to the dead connection: Redis may or may not
  // have had it, so it is not sent again. Later ones, once the store has seen the connection
  // fail, cannot reach Redis and are kept.
  backend.Add(rows(100));
  ASSERT_TRUE(WaitUntil([&] { return store->stats().reconnects.load() > reconnects; }));
  for (int i = 0; i < 3; ++i) {
    const uint64_t errors = store->stats().command_errors.load();
    backend.Add(rows(1));
    ASSERT_TRUE(WaitUntil([&] { return store->stats().command_errors.load() > errors; }));  // kept
  }
  server.Start();  // same port, empty
  std::string got;
  EXPECT_TRUE(WaitUntil(
      [&] {
        backend.Add({});  // the meter's flush with nothing new
        got = server.Cli("HGET " + key + " " + field);
        return got == "3" || got == "103";
      },
      std::chrono::seconds(5), std::chrono::milliseconds(10)))
      << got;
  EXPECT_GE(store->stats().command_errors.load(), 3u);
  EXPECT_TRUE(WaitUntil(
      [&] {
        backend.Add({});
        return server.Cli("SMEMBERS u:usage:2026-11-29") == "acme";
      },
      std::chrono::seconds(5), std::chrono::milliseconds(10)))
      << server.Cli("SMEMBERS u:usage:2026-11-29");
  EXPECT_GT(std::stoll(server.Cli("TTL " + key)), 86'400 * 300);
}

}  // namespace
}  // namespace tollgate::store
