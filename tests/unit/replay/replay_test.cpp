#include <tollgate/replay/replay.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include <gtest/gtest.h>

namespace tollgate::replay {
namespace {

std::shared_ptr<const policy::Policy> Build(const std::string& mode = "enforce") {
  auto c = config::ParseConfig(R"(
mode: )" + mode + R"(
plans:
  free:
    limits:
      - {name: burst, capacity: 2, refill_per_second: 1}
  team:
    limits:
      - {name: burst, capacity: 100, refill_per_second: 100}
anonymous:
  limits:
    - {name: burst, capacity: 1, refill_per_second: 0.001}
identity:
  invalid_key_limit: {capacity: 1, refill_per_second: 0.001}
keys:
  - {key: sk-f, id: k-free, account: a, plan: free}
  - {key: sk-t, id: k-team, account: b, plan: team}
  - {key: sk-d, id: k-denied, account: c, plan: free}
deny:
  keys: [k-denied]
routes:
  - {name: export, path: /v1/export, cost: {query: pages, per: 50, min: 1}}
  - {name: public, path: /public/*, identity: ip}
  - {name: health, path: /health, identity: none}
)");
  EXPECT_TRUE(c.ok()) << c.error();
  auto p = policy::Policy::Build(std::move(c).value());
  EXPECT_TRUE(p.ok()) << p.error();
  return *p;
}

struct L {
  std::string ts = "2026-11-29T21:59:56.000Z";
  std::string key_id = "k-free";
  std::string decision = "allowed";
  std::string route = "(default)";
  std::string path = "/v1/items";
  std::string query;
  int status = 200;
  std::string latency = "0.100";
  std::string client = "10.0.0.1";
  std::string decided;  // decided_us, when not empty
  std::string Text() const {
    return R"({"ts":")" + ts + R"(","method":"GET","path":")" + path + R"(","query":")" + query +
           R"(","status":)" + std::to_string(status) + R"(,"client":")" + client +
           R"(","peer":"10.0.0.1","request_id":"r","key_id":")" + key_id +
           R"(","plan":"free","route":")" + route + R"(","decision":")" + decision +
           R"(","cost":1,"upstream_status":200,"latency_ms":)" + latency +
           (decided.empty() ? "" : R"(,"decided_us":)" + decided) + "}";
  }
};

const Group* Find(const std::vector<Group>& groups, std::string_view name) {
  for (const Group& g : groups) {
    if (g.name == name) return &g;
  }
  return nullptr;
}

TEST(VirtualClock, NeverGoesBack) {
  VirtualClock clock;
  EXPECT_TRUE(clock.AdvanceTo(core::Instant::FromUnixSeconds(100)));
  EXPECT_TRUE(clock.AdvanceTo(core::Instant::FromUnixSeconds(100)));
  EXPECT_FALSE(clock.AdvanceTo(core::Instant::FromUnixSeconds(99)));
  EXPECT_EQ(clock.Now(), core::Instant::FromUnixSeconds(100));
  EXPECT_TRUE(clock.AdvanceTo(core::Instant::FromUnixSeconds(101)));
  EXPECT_EQ(clock.Now(), core::Instant::FromUnixSeconds(101));
}

TEST(Replay, CountsRejectionsAndWhatChanged) {
  Replayer r(Build());
  // Recorded: all four allowed, the fifth rejected. The candidate (capacity 2, all at once):
  // the 3rd and 4th newly rejected, the 5th rejected as recorded.
  for (int i = 0; i < 4; ++i) r.Feed(L{}.Text());
  r.Feed(L{.decision = "rejected", .status = 429}.Text());
  // A team key recorded as rejected that the candidate admits.
  r.Feed(L{.key_id = "k-team", .decision = "rejected", .status = 429}.Text());
  const Report rep = r.Finish();
  EXPECT_EQ(rep.lines, 6u);
  EXPECT_EQ(rep.total.requests, 6u);
  EXPECT_EQ(rep.total.rejected, 3u);
  EXPECT_EQ(rep.total.shadow_rejected, 0u);
  EXPECT_EQ(rep.total.newly_rejected, 2u);
  EXPECT_EQ(rep.total.newly_admitted, 1u);
  EXPECT_EQ(rep.total.first_rejection_line, 3u);
  EXPECT_DOUBLE_EQ(rep.total.Share(), 0.5);
  const Group* free = Find(rep.plans, "free");
  ASSERT_NE(free, nullptr);
  EXPECT_EQ(free->counts.requests, 5u);
  EXPECT_EQ(free->counts.rejected, 3u);
  const Group* team = Find(rep.plans, "team");
  ASSERT_NE(team, nullptr);
  EXPECT_EQ(team->counts.newly_admitted, 1u);
  ASSERT_EQ(rep.top_keys.size(), 2u);
  EXPECT_EQ(rep.top_keys[0].name, "k-free");
  EXPECT_EQ(rep.top_keys[0].counts.rejected, 3u);
  const Group* route = Find(rep.routes, "(default)");
  ASSERT_NE(route, nullptr);
  EXPECT_EQ(route->counts.requests, 6u);
  EXPECT_TRUE(ExceedsShare(rep, 0.49));
  EXPECT_FALSE(ExceedsShare(rep, 0.5));
}

TEST(Replay, TheClockIsEachLinesDecisionTime) {
  Replayer r(Build());
  // capacity 2, 1 token a second.
  r.Feed(L{.ts = "2026-11-29T21:59:56.000Z"}.Text());
  r.Feed(L{.ts = "2026-11-29T21:59:56.000Z"}.Text());
  r.Feed(L{.ts = "2026-11-29T21:59:56.500Z"}.Text());  // half a token: rejected
  r.Feed(L{.ts = "2026-11-29T21:59:57.100Z"}.Text());  // 1.1 tokens: allowed
  // Logged 2.0 s later but started 1.9 s before that: decided at 57.2 (0.1 token): rejected.
  r.Feed(L{.ts = "2026-11-29T21:59:59.100Z", .latency = "1900.000"}.Text());
  // Stamped before the line above: decided before 57.1, at 56.9999 (0.9999 token): rejected.
  r.Feed(L{.ts = "2026-11-29T21:59:57.000Z"}.Text());
  const Report rep = r.Finish();
  EXPECT_EQ(rep.total.rejected, 3u);
  EXPECT_EQ(rep.total.first_rejection_line, 3u);
  EXPECT_EQ(rep.total.first_rejection_ts, "2026-11-29T21:59:56.500Z");
  EXPECT_EQ(rep.clock_held, 0u);
}

// Issue 31: the serving config replayed over its own log reported false differences, lines
// being decided in file order (when requests finished). A long request decided first, then two
// short ones: the gateway admitted the long one and the first short one and rejected the second
// (capacity 2); the file has the short ones first.
TEST(Replay, DecidesLinesInTheOrderTheyWereDecided) {
  struct Case {
    const char* why;
    std::vector<L> lines;  // in file order
  };
  const Case cases[] = {
      {"decided_us",
       {L{.ts = "2026-11-29T21:59:56.003Z", .latency = "1.500", .decided = "1795989596001000"},
        L{.ts = "2026-11-29T21:59:56.004Z",
          .decision = "rejected",
          .status = 429,
          .latency = "1.000",
          .decided = "1795989596002000"},
        L{.ts = "2026-11-29T21:59:59.000Z", .latency = "3000.000", .decided = "1795989596000000"}}},
      {"ts less latency_ms (logs before decided_us)",
       {L{.ts = "2026-11-29T21:59:56.010Z", .latency = "5.000"},
        L{.ts = "2026-11-29T21:59:56.020Z",
          .decision = "rejected",
          .status = 429,
          .latency = "5.000"},
        L{.ts = "2026-11-29T21:59:59.000Z", .latency = "3000.000"}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.why);
    Replayer r(Build());
    for (const L& l : c.lines) r.Feed(l.Text());
    const Report rep = r.Finish();
    EXPECT_EQ(rep.total.requests, 3u);
    EXPECT_EQ(rep.total.rejected, 1u);
    EXPECT_EQ(rep.total.newly_rejected, 0u);
    EXPECT_EQ(rep.total.newly_admitted, 0u);
    EXPECT_EQ(rep.total.first_rejection_line, 2u);  // the line's own number in the file
    EXPECT_EQ(rep.clock_held, 0u);
  }
  // A request longer than the reorder window is decided at the time reached, and counted.
  Replayer r(Build(), {.reorder_window = core::Duration::Seconds(1)});
  r.Feed(L{.ts = "2026-11-29T21:59:56.010Z", .latency = "5.000"}.Text());
  r.Feed(L{.ts = "2026-11-29T21:59:58.000Z", .latency = "5.000"}.Text());  // releases the first
  r.Feed(L{.ts = "2026-11-29T21:59:59.000Z", .latency = "3000.000"}.Text());
  EXPECT_EQ(r.Finish().clock_held, 1u);
}

TEST(Replay, ShadowCandidatesCountWouldBeRejections) {
  Replayer r(Build("shadow"));
  for (int i = 0; i < 3; ++i) r.Feed(L{}.Text());
  r.Feed(L{.decision = "shadow_rejected"}.Text());
  const Report rep = r.Finish();
  EXPECT_EQ(rep.total.rejected, 0u);
  EXPECT_EQ(rep.total.shadow_rejected, 2u);
  EXPECT_EQ(rep.total.WouldReject(), 2u);
  EXPECT_EQ(rep.total.newly_rejected, 1u);  // the 3rd; the 4th was recorded as shadow_rejected
  EXPECT_EQ(rep.total.newly_admitted, 0u);
  EXPECT_TRUE(ExceedsShare(rep, 0.25));
}

TEST(Replay, RoutesCostsAndIdentitiesFromTheCandidate) {
  Replayer r(Build());
  // pages=120 costs 3 under the candidate: more than the free plan's capacity of 2.
  r.Feed(L{.route = "export", .path = "/v1/export", .query = "pages=120"}.Text());
  r.Feed(L{.route = "export", .path = "/v1/export", .query = "pages=x", .status = 400}.Text());
  // Anonymous traffic on an ip route is limited per client (capacity 1).
  r.Feed(L{.key_id = "", .route = "public", .path = "/public/a"}.Text());
  r.Feed(L{.key_id = "", .route = "public", .path = "/public/b"}.Text());
  r.Feed(L{.key_id = "", .route = "public", .path = "/public/b", .client = "10.0.0.2"}.Text());
  // Never limited: not routed (a built-in endpoint), an identity-none route, the status
  // endpoint.
  r.Feed(L{.key_id = "", .decision = "none", .route = "", .path = "/healthz"}.Text());
  r.Feed(L{.key_id = "", .decision = "none", .route = "health", .path = "/health"}.Text());
  r.Feed(L{.decision = "status", .path = "/v1/rate-limit"}.Text());
  // Invalid keys: 401, then the per-address invalid-key limit (capacity 1) rejects.
  r.Feed(L{.key_id = "", .decision = "invalid_key", .status = 401}.Text());
  r.Feed(L{.key_id = "", .decision = "invalid_key", .status = 401}.Text());
  // A key the candidate no longer knows is an invalid key; a denied key is blocked.
  r.Feed(L{.key_id = "k-gone", .client = "10.0.0.3"}.Text());
  r.Feed(L{.key_id = "k-denied"}.Text());
  // A keyed route for a line the gateway did not limit by key: no key to use.
  r.Feed(L{.key_id = "", .decision = "none"}.Text());
  const Report rep = r.Finish();
  EXPECT_EQ(rep.total.requests, 13u);
  EXPECT_EQ(rep.invalid_cost, 1u);
  EXPECT_EQ(rep.not_routed, 1u);
  EXPECT_EQ(rep.unlimited, 2u);
  EXPECT_EQ(rep.invalid_key, 2u);  // the first invalid key and k-gone
  EXPECT_EQ(rep.blocked, 1u);
  EXPECT_EQ(rep.unknown_identity, 1u);
  // Rejected: the export (cost 3), /public/b from 10.0.0.1, the second invalid key.
  EXPECT_EQ(rep.total.rejected, 3u);
  const Group* ip = Find(rep.top_keys, "ip:10.0.0.1");
  ASSERT_NE(ip, nullptr);
  EXPECT_EQ(ip->counts.requests, 2u);
  EXPECT_EQ(ip->counts.rejected, 1u);
  const Group* badkey = Find(rep.top_keys, "badkey:10.0.0.1");
  ASSERT_NE(badkey, nullptr);
  EXPECT_EQ(badkey->counts.rejected, 1u);
  const Group* anonymous = Find(rep.plans, "anonymous");
  ASSERT_NE(anonymous, nullptr);
  EXPECT_EQ(anonymous->counts.requests, 3u);
  const Group* export_route = Find(rep.routes, "export");
  ASSERT_NE(export_route, nullptr);
  EXPECT_EQ(export_route->counts.requests, 2u);
  EXPECT_EQ(export_route->counts.rejected, 1u);
  ASSERT_NE(Find(rep.routes, "(not routed)"), nullptr);
}

TEST(Replay, MalformedLinesAreCountedWithTheirNumbers) {
  Replayer r(Build());
  r.Feed(L{}.Text());
  r.Feed("{\"ts\":");
  r.Feed(L{}.Text());
  r.Feed("not json");
  const Report rep = r.Finish();
  EXPECT_EQ(rep.lines, 4u);
  EXPECT_EQ(rep.malformed, 2u);
  EXPECT_EQ(rep.total.requests, 2u);
  ASSERT_EQ(rep.first_malformed.size(), 2u);
  EXPECT_EQ(rep.first_malformed[0].line, 2u);
  EXPECT_EQ(rep.first_malformed[0].reason, "truncated");
  EXPECT_EQ(rep.first_malformed[1].line, 4u);
}

TEST(Replay, ReadsAFileWithAnOverlongLine) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  const std::string text = L{}.Text() + "\n" + std::string(200'000, 'x') + "\n" + L{}.Text() +
                           "\n\n" + L{}.Text();  // the last line without a newline
  ASSERT_EQ(std::fwrite(text.data(), 1, text.size(), f), text.size());
  std::fflush(f);
  std::rewind(f);
  Replayer r(Build());
  std::string error;
  ASSERT_TRUE(r.FeedFile(fileno(f), error)) << error;
  std::fclose(f);
  const Report rep = r.Finish();
  EXPECT_EQ(rep.lines, 5u);
  EXPECT_EQ(rep.total.requests, 3u);
  ASSERT_EQ(rep.first_malformed.size(), 2u);
  EXPECT_EQ(rep.first_malformed[0].line, 2u);
  EXPECT_EQ(rep.first_malformed[0].reason, "line too long");
  EXPECT_EQ(rep.first_malformed[1].line, 4u);
  EXPECT_EQ(rep.first_malformed[1].reason, "empty line");
}

TEST(Replay, RendersAnEmptyLog) {
  Replayer r(Build());
  const Report rep = r.Finish();
  EXPECT_EQ(rep.lines, 0u);
  EXPECT_FALSE(ExceedsShare(rep, 0.0));
  EXPECT_NE(Render(rep, Format::kTable, std::nullopt).find("the log is empty"), std::string::npos);
  EXPECT_NE(Render(rep, Format::kJson, std::nullopt).find("\"empty\":true"), std::string::npos);
  EXPECT_NE(Render(rep, Format::kCsv, std::nullopt).find("the log is empty"), std::string::npos);
}

TEST(Replay, CsvQuotesNamesWithCommas) {
  Replayer r(Build());
  // The client a,"b (escaped in the line) on an ip route.
  r.Feed(L{.key_id = "", .route = "public", .path = "/public/a", .client = R"(a,\"b)"}.Text());
  const std::string csv = Render(r.Finish(), Format::kCsv, 0.5);
  EXPECT_NE(csv.find("key,\"ip:a,\"\"b\",1,0,0,"), std::string::npos) << csv;
}

}  // namespace
}  // namespace tollgate::replay
