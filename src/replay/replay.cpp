// A candidate policy over recorded lines: each line's caller, route and cost re-derived with the
// gateway's own resolution (Policy::Match, engine::Admitter, the deny list), decided by the real
// engine on a MemoryStore at the line's time.
#include <tollgate/replay/replay.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include <tollgate/contract/log_decision.hpp>
#include <tollgate/engine/admitter.hpp>
#include <tollgate/engine/engine.hpp>
#include <tollgate/store/memory_store.hpp>
#include <tollgate/util/hash.hpp>

#include "replay/log_line.hpp"
#include "replay/reorder.hpp"

namespace tollgate::replay {
namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return util::Hash64(s); }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

template <class V>
V& Entry(StringMap<V>& map, std::string_view name) {
  auto it = map.find(name);
  if (it == map.end()) it = map.emplace(std::string(name), V{}).first;
  return it->second;
}

// What the candidate does with one line.
enum class Outcome {
  kAllowed,
  kRejected,
  kShadowRejected,
  kNotRouted,
  kUnlimited,
  kInvalidKey,
  kBlocked,
  kInvalidCost,
  kUnknownIdentity,
};

using contract::LogDecision;

// The decision a line records (its `decision`); nullopt for a name tollgate never writes.
std::optional<LogDecision> Decided(const LogLine& l) {
  return contract::ParseLogDecision(l.decision);
}

// The built-in endpoints about the caller's own key consume nothing (Exchange::Identify).
bool ConsumesNothing(const LogLine& l) {
  return l.method == "GET" && (l.path == "/v1/rate-limit" || l.path == "/v1/usage") &&
         (Decided(l) == LogDecision::kStatus || Decided(l) == LogDecision::kNone);
}

// Whether the gateway recorded a rejection: enforced or shadow, a replica's own while its store
// was down (fail_mode: local), or the invalid-key limit's 429.
bool RecordedRejection(const LogLine& l) {
  const std::optional<LogDecision> d = Decided(l);
  return (d && contract::IsRejection(*d)) || d == LogDecision::kShadowRejected ||
         (d == LogDecision::kInvalidKey && l.status == 429);
}

void Count(Counts& c, Outcome o, bool recorded_rejection, uint64_t line, std::string_view ts) {
  ++c.requests;
  const bool rejects = o == Outcome::kRejected || o == Outcome::kShadowRejected;
  if (o == Outcome::kRejected) ++c.rejected;
  if (o == Outcome::kShadowRejected) ++c.shadow_rejected;
  if (rejects && c.first_rejection_line == 0) {
    c.first_rejection_line = line;
    c.first_rejection_ts.assign(ts);
  }
  if (rejects && !recorded_rejection) ++c.newly_rejected;
  if (!rejects && recorded_rejection) ++c.newly_admitted;
}

struct KeyEntry {
  bool resolved = false;
  const policy::Key* key = nullptr;  // in the candidate; null: unknown there
  Counts counts;
};

}  // namespace

bool VirtualClock::AdvanceTo(core::Instant t) {
  int64_t now = us_.load();
  while (t.unix_micros() > now) {
    if (us_.compare_exchange_weak(now, t.unix_micros())) return true;
  }
  return t.unix_micros() == now;
}

double Counts::Share() const {
  return requests == 0 ? 0.0 : static_cast<double>(WouldReject()) / static_cast<double>(requests);
}

struct Replayer::State {
  State(std::shared_ptr<const policy::Policy> p, Options o)
      : pol(std::move(p)),
        options(o),
        store({.max_keys = pol->config().store.max_keys}, clock),
        engine(store),
        plans(pol->plans().size() + 1) {}

  // Where one routed line's counts go, and what the candidate does with it.
  struct Placed {
    Outcome outcome = Outcome::kUnlimited;
    const policy::Plan* plan = nullptr;
    Counts* key = nullptr;
  };

  // Decides the held lines decided at or before `until_us`, earliest first.
  void Release(int64_t until_us);

  void Line(const LogLine& l, uint64_t number);
  Placed Decide(const LogLine& l, const policy::Route& route);
  Outcome Apply(size_t n) {
    const store::Batch batch{.scope = scopes.primary,
                             .checks = {checks.data(), n},
                             .mode = store::Mode::kConsume,
                             .now = clock.Now()};
    const store::ApplyResult r = store.ApplyNow(batch, decisions);
    const engine::Verdict v = engine.Conclude({.batch = batch}, {decisions.data(), n}, r);
    if (!v.allowed()) return Outcome::kRejected;
    return v.shadow_rejections > 0 ? Outcome::kShadowRejected : Outcome::kAllowed;
  }
  Counts& Address(std::string_view prefix, std::string_view client) {
    name.assign(prefix).append(client);
    return Entry(addresses, name);
  }

  std::shared_ptr<const policy::Policy> pol;
  Options options;
  VirtualClock clock;
  store::MemoryStore store;
  engine::Engine engine;
  std::array<store::Check, engine::kMaxChecks> checks;
  std::array<core::Decision, engine::kMaxChecks> decisions;
  engine::Scopes scopes;
  std::string scratch, name;
  Report report;
  StringMap<KeyEntry> keys;     // by key id
  StringMap<Counts> addresses;  // "ip:<client>" (anonymous), "badkey:<client>" (invalid keys)
  std::vector<Counts> plans;    // by Plan::index (the anonymous limits last)
  Counts invalid_key_plan, no_plan, not_routed_route;
  std::unordered_map<const policy::Route*, Counts> routes;
  // Well-formed lines held until no line still to come can have been decided before them.
  ReorderBuffer held;
  int64_t finished_us = INT64_MIN;  // the latest `ts` read
};

void Replayer::State::Release(int64_t until_us) {
  held.Release(until_us, [this](const ReorderBuffer::Line& h) {
    if (h.parsed) return Line(h.line, h.number);
    LogLine l;
    if (ParseLogLine(h.Text(), l, scratch) == nullptr) Line(l, h.number);
  });
}

Replayer::State::Placed Replayer::State::Decide(const LogLine& l, const policy::Route& route) {
  Placed out;
  if (ConsumesNothing(l)) return out;
  // Whether the caller presented a key: the log names it, or recorded it as invalid.
  const bool presented = !l.key_id.empty() || Decided(l) == LogDecision::kInvalidKey;
  const bool keyed = engine::LimitedByKey(route, presented);
  KeyEntry* entry = nullptr;
  if (!l.key_id.empty()) {
    entry = &Entry(keys, l.key_id);
    if (!entry->resolved) {
      entry->key = pol->FindById(l.key_id);
      entry->resolved = true;
    }
  }
  const policy::Key* key = keyed && entry ? entry->key : nullptr;
  if (keyed && l.key_id.empty() && Decided(l) != LogDecision::kInvalidKey) {
    // The gateway did not read a key on this route (it was not limited by key then).
    out.outcome = Outcome::kUnknownIdentity;
    return out;
  }
  // The one admission (engine/admitter.hpp): the log names the route's method, not the
  // overrides the request carried, so the recorded method alone is matched (Line()).
  const engine::Admitted a = engine::Admitter(*pol).Admit({.route = &route,
                                                           .presented_key = presented,
                                                           .key = key,
                                                           .client = l.client,
                                                           .query = l.query,
                                                           .now = clock.Now()},
                                                          checks, scopes);
  if (a.denied) {
    out.outcome = Outcome::kBlocked;
    out.plan = a.plan;
    return out;
  }
  out.plan = a.plan;
  switch (a.kind) {
    case engine::Admission::Kind::kNone:
      return out;
    case engine::Admission::Kind::kInvalidCost:
      out.outcome = Outcome::kInvalidCost;
      return out;
    case engine::Admission::Kind::kInvalidKey:
      out.outcome = Apply(a.n) == Outcome::kRejected ? Outcome::kRejected : Outcome::kInvalidKey;
      out.key = &Address("badkey:", l.client);
      return out;
    case engine::Admission::Kind::kChecks:
      out.outcome = Apply(a.n);
      out.key = key ? &entry->counts : &Address("ip:", l.client);
      return out;
  }
  return out;
}

void Replayer::State::Line(const LogLine& l, uint64_t number) {
  if (!clock.AdvanceTo(core::Instant::FromUnixMicros(l.DecidedMicros()))) {
    ++report.clock_held;
  }
  const bool recorded = RecordedRejection(l);
  Counts* route_counts = &not_routed_route;
  Placed placed{.outcome = Outcome::kNotRouted};
  if (!l.route.empty()) {
    const policy::Route& route = pol->Match(l.method, l.path);
    route_counts = &routes[&route];
    placed = Decide(l, route);
  }
  Counts* plan_counts = placed.outcome == Outcome::kInvalidKey ||
                                (placed.outcome == Outcome::kRejected && !placed.plan)
                            ? &invalid_key_plan
                        : placed.plan ? &plans[placed.plan->index]
                                      : &no_plan;
  switch (placed.outcome) {
    case Outcome::kNotRouted:
      ++report.not_routed;
      break;
    case Outcome::kUnlimited:
      ++report.unlimited;
      break;
    case Outcome::kInvalidKey:
      ++report.invalid_key;
      break;
    case Outcome::kBlocked:
      ++report.blocked;
      break;
    case Outcome::kInvalidCost:
      ++report.invalid_cost;
      break;
    case Outcome::kUnknownIdentity:
      ++report.unknown_identity;
      break;
    default:
      break;
  }
  for (Counts* c : {&report.total, route_counts, plan_counts, placed.key}) {
    if (c) Count(*c, placed.outcome, recorded, number, l.ts);
  }
}

Replayer::Replayer(std::shared_ptr<const policy::Policy> candidate, Options options)
    : state_(std::make_unique<State>(std::move(candidate), options)) {}

Replayer::~Replayer() = default;

void Replayer::Feed(std::string_view line) {
  State& s = *state_;
  ++s.report.lines;
  LogLine l;
  if (const char* reason = ParseLogLine(line, l, s.scratch)) {
    --s.report.lines;
    return FeedMalformed(reason);
  }
  // Issue 31: lines are written when requests finish, so a long request decided first comes
  // after shorter ones decided later; deciding in file order gave false differences. A line is
  // held until lines finishing `reorder_window` after its decision have been read.
  s.finished_us = std::max(s.finished_us, l.ts_micros);
  s.held.Push(l, s.report.lines, line);
  s.Release(s.finished_us - s.options.reorder_window.micros());
}

void Replayer::FeedMalformed(const char* reason) {
  Report& r = state_->report;
  ++r.lines;
  ++r.malformed;
  if (r.first_malformed.size() < state_->options.malformed_listed) {
    r.first_malformed.push_back({r.lines, reason});
  }
}

bool Replayer::FeedFile(int fd, std::string& error) {
  // A line is at most kMaxLineBytes: one longer is skipped to its newline and reported.
  std::vector<char> buffer(size_t{1} << 20);
  size_t have = 0;
  bool skipping = false;
  for (;;) {
    const ssize_t n = read(fd, buffer.data() + have, buffer.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = std::strerror(errno);
      return false;
    }
    if (n == 0) break;
    have += static_cast<size_t>(n);
    size_t start = 0;
    while (const void* found = std::memchr(buffer.data() + start, '\n', have - start)) {
      const size_t end = static_cast<size_t>(static_cast<const char*>(found) - buffer.data());
      if (skipping) {
        FeedMalformed("line too long");
        skipping = false;
      } else {
        Feed(std::string_view(buffer.data() + start, end - start));
      }
      start = end + 1;
    }
    std::memmove(buffer.data(), buffer.data() + start, have - start);
    have -= start;
    if (have > kMaxLineBytes) {
      skipping = true;
      have = 0;
    }
  }
  if (skipping) {
    FeedMalformed("line too long");
  } else if (have > 0) {
    Feed(std::string_view(buffer.data(), have));  // the last line, without a newline
  }
  return true;
}

Report Replayer::Finish() {
  State& s = *state_;
  s.Release(INT64_MAX);
  Report r = s.report;
  auto add = [](std::vector<Group>& to, std::string_view name, const Counts& c) {
    if (c.requests > 0) to.push_back({std::string(name), c});
  };
  for (const policy::Plan& p : s.pol->plans()) add(r.plans, p.name, s.plans[p.index]);
  add(r.plans, s.pol->anonymous().name, s.plans[s.pol->anonymous().index]);
  add(r.plans, "(invalid key)", s.invalid_key_plan);
  add(r.plans, "(none)", s.no_plan);
  for (const auto& [route, c] : s.routes) add(r.routes, route->label, c);
  add(r.routes, "(not routed)", s.not_routed_route);
  auto by_name = [](const Group& a, const Group& b) { return a.name < b.name; };
  std::sort(r.plans.begin(), r.plans.end(), by_name);
  std::sort(r.routes.begin(), r.routes.end(), by_name);

  std::vector<Group> keys;
  for (const auto& [id, e] : s.keys) add(keys, id, e.counts);
  for (const auto& [address, c] : s.addresses) add(keys, address, c);
  const auto worse = [](const Group& a, const Group& b) {
    if (a.counts.WouldReject() != b.counts.WouldReject()) {
      return a.counts.WouldReject() > b.counts.WouldReject();
    }
    if (a.counts.requests != b.counts.requests) return a.counts.requests > b.counts.requests;
    return a.name < b.name;
  };
  const size_t top = std::min(keys.size(), s.options.top_keys);
  std::partial_sort(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(top), keys.end(), worse);
  keys.resize(top);
  r.top_keys = std::move(keys);
  return r;
}

bool ExceedsShare(const Report& report, double max_share) {
  return report.total.requests > 0 && report.total.Share() > max_share;
}

}  // namespace tollgate::replay
