// The live page's data (GET /admin/ui, issue 23; its files are ui_assets.hpp's): GET
// /admin/ui/data, everything the page shows in one JSON object. The page polls it each second
// and computes the rates itself from the cumulative counters. Also the configuration's version,
// which the page, the start-up line and the reload line show.
#include <algorithm>
#include <map>
#include <tuple>

#include <arpa/inet.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <tollgate/core/calendar.hpp>
#include <tollgate/core/limit.hpp>
#include <tollgate/util/clock.hpp>
#include <tollgate/util/digest.hpp>

#include "endpoints.hpp"
#include "live_page.hpp"
#include "worker.hpp"

namespace tollgate::http {
namespace json = boost::json;

namespace {

constexpr int64_t kTopWindowSeconds = 60;
constexpr size_t kTopItems = 10;
constexpr size_t kMaxUsageRows = 100;

json::value OrNull(const std::optional<int64_t>& v) { return v ? json::value(*v) : nullptr; }

// One account's usage over a period: cost admitted (what its quota counted) and requests.
struct PeriodUsage {
  usage::UsageCounts counts;
  int64_t Used() const { return counts.cost[0] + counts.cost[1] + counts.cost[2]; }
};

struct AccountUsage {
  const policy::Key* key = nullptr;  // one of its keys: its plan's quotas apply
  std::string plan;
  size_t keys = 0;
  PeriodUsage day, month;
};

// The plan's quota of `period` (a key's override of it when one is in force), as the page
// shows it: allowance, ceiling, and whose budget counts.
json::object PeriodJson(const AccountUsage& a, const PeriodUsage& u, core::Period period,
                        core::Instant now) {
  json::object o{{"used", u.Used()},
                 {"requests", u.counts.requests[0] + u.counts.requests[1] + u.counts.requests[2]},
                 {"rejected", u.counts.requests[3]},
                 {"allowance", nullptr},
                 {"ceiling", nullptr}};
  if (!a.key) return o;
  const policy::Plan& plan = *a.key->plan;
  for (size_t i = 0; i < plan.limits.size(); ++i) {
    const core::Limit& limit = a.key->LimitAt(i, now);
    if (limit.algorithm() != core::Algorithm::kQuota) continue;
    const auto& q = std::get<core::Quota>(limit.impl());
    if (q.period() != period) continue;
    o["allowance"] = OrNull(q.allowance());
    o["ceiling"] = OrNull(q.ceiling());
    o["per"] = plan.limits[i].scope == config::LimitScope::kAccount ? "account" : "key";
    break;
  }
  return o;
}

json::array UsageRows(const policy::Policy& pol, core::Instant now,
                      const std::vector<usage::UsageRecord>& day,
                      const std::vector<usage::UsageRecord>& month) {
  std::map<std::string, AccountUsage> accounts;
  auto add = [&](const usage::UsageRecord& r, PeriodUsage AccountUsage::*period) {
    AccountUsage& a = accounts[r.account];
    (a.*period).counts.Add(r.counts);
    if (const policy::Key* key = pol.FindById(r.key_id); key && !a.key) {
      a.key = key;
      a.plan = key->plan->name;
    }
  };
  for (const auto& r : month) {
    add(r, &AccountUsage::month);
    ++accounts[r.account].keys;
  }
  for (const auto& r : day) add(r, &AccountUsage::day);
  std::vector<const std::pair<const std::string, AccountUsage>*> order;
  for (const auto& entry : accounts) order.push_back(&entry);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return a->second.month.Used() > b->second.month.Used();
  });
  if (order.size() > kMaxUsageRows) order.resize(kMaxUsageRows);
  json::array rows;
  for (const auto* entry : order) {
    const AccountUsage& a = entry->second;
    rows.push_back(json::object{{"account", entry->first},
                                {"plan", a.plan},
                                {"keys", a.keys},
                                {"day", PeriodJson(a, a.day, core::Period::kDay, now)},
                                {"month", PeriodJson(a, a.month, core::Period::kMonth, now)}});
  }
  return rows;
}

json::array TopItems(const metrics::SpaceSaving& sketch, std::string_view of) {
  json::array items;
  for (const auto& item : sketch.Top(kTopItems)) {
    items.push_back(json::object{{of, item.key}, {"count", item.count}, {"error", item.error}});
  }
  return items;
}

// Per plan: requests decided, rejected (429) and shadow-rejected, from the counters /metrics
// shows (cumulative, all workers). Admitted is decided minus rejected: it includes what a
// failing store let through (fail_mode: open).
json::array DecisionsJson(Gateway::Impl& g, const policy::Policy& pol) {
  std::vector<std::string> order;
  std::map<std::string, std::array<uint64_t, 3>, std::less<>> by_plan;
  auto plan = [&](const std::string& name) -> std::array<uint64_t, 3>& {
    auto [it, added] = by_plan.try_emplace(name, std::array<uint64_t, 3>{});
    if (added) order.push_back(name);
    return it->second;
  };
  for (const policy::Plan& p : pol.plans()) plan(p.name);
  plan(pol.anonymous().name);
  const char* families[] = {"tollgate_requests_by_mode_total", "tollgate_rejections_total",
                            "tollgate_shadow_rejections_total"};
  for (size_t i = 0; i < 3; ++i) {
    for (const auto& s : g.metrics.Samples(families[i])) {
      if (auto name = metrics::LabelValue(s.labels, "plan")) plan(*name)[i] += s.value;
    }
  }
  json::array out;
  for (const std::string& name : order) {
    const auto& [decided, rejected, shadow] = by_plan[name];
    out.push_back(json::object{{"plan", name},
                               {"decided", decided},
                               {"admitted", decided - std::min(decided, rejected)},
                               {"rejected", rejected},
                               {"shadow_rejected", shadow}});
  }
  return out;
}

// {"store": ..., "key_source": ...}: whether each answers, and its failures so far.
json::object HealthJson(Gateway::Impl& g) {
  const bool ready = g.store_ready.load(std::memory_order_relaxed);
  const bool open = g.redis && g.redis->stats().breaker_open.load(std::memory_order_relaxed) != 0;
  json::object store{{"type", g.redis ? "redis" : "memory"},
                     {"status", !ready ? "unavailable"
                                : open ? "breaker_open"
                                       : "ok"},
                     {"degraded_total", g.engine->stats().degraded.load()},
                     {"unavailable_total", g.engine->stats().unavailable.load()}};
  if (g.redis) {
    store["timeouts_total"] = g.redis->stats().timeouts.load();
    store["errors_total"] = g.redis->stats().errors.load();
    store["last_error"] = g.redis->LastError();
  }
  json::object keys{{"type", g.key_source ? "postgres" : "file"}, {"status", "ok"}};
  if (g.key_source) {
    const policy::KeySnapshotStats& s = g.key_source->stats();
    keys["status"] = s.connected.load()             ? "ok"
                     : s.using_snapshot_file.load() ? "snapshot_file"
                                                    : "disconnected";
    keys["loads_total"] = s.loads.load();
    keys["errors_total"] = s.errors.load();
    keys["reconnects_total"] = s.reconnects.load();
    keys["skipped_rows_total"] = s.skipped_rows.load();
  }
  return json::object{{"store", std::move(store)}, {"key_source", std::move(keys)}};
}

}  // namespace

void LivePage::SetConfig(std::string_view file_text) {
  std::string at;
  util::AppendIsoNow(at);
  std::lock_guard lock(mu_);
  version_ = util::Sha256Hex(file_text).substr(0, 12);
  loaded_at_ = std::move(at);
  usage_json_.clear();  // its allowances and ceilings are the old configuration's
}

std::string LivePage::Version() const {
  std::lock_guard lock(mu_);
  return version_;
}

std::string LivePage::LoadedAt() const {
  std::lock_guard lock(mu_);
  return loaded_at_;
}

namespace {

// The host of a Host value or an Origin's authority, without its port ("[::1]" keeps brackets).
std::string_view HostOnly(std::string_view authority) {
  if (authority.starts_with('[')) return authority.substr(0, authority.find(']') + 1);
  return authority.substr(0, authority.find(':'));
}

bool LiteralOrLocalhost(std::string_view host) {
  if (host == "localhost" || (host.size() > 2 && host.front() == '[' && host.back() == ']')) {
    return true;
  }
  in_addr v4{};
  return !host.empty() && inet_pton(AF_INET, std::string(host).c_str(), &v4) == 1;
}

}  // namespace

std::string_view AdminBrowserRefusal(std::string_view path, std::string_view host,
                                     std::string_view origin, std::string_view fetch_site) {
  if (fetch_site == "cross-site" || fetch_site == "same-site") return "a request from another site";
  if (!origin.empty()) {
    const size_t scheme = origin.find("://");
    if (scheme == std::string_view::npos || origin.substr(scheme + 3) != host) {
      return "a request from another origin";
    }
  }
  if (path.starts_with("/admin/ui") && !host.empty() && !LiteralOrLocalhost(HostOnly(host))) {
    return "the live page answers to an IP address or localhost only";
  }
  return {};
}

void UiData(Gateway::Impl& g, std::string /*query*/, Gateway::AdminReply reply) {
  const core::Instant now = util::SystemClock::Instance().Now();
  const int64_t now_s = now.unix_micros() / 1'000'000;
  std::shared_ptr<const policy::Policy> pol = g.CurrentPolicy();
  auto body = std::make_shared<json::object>();
  json::object& o = *body;
  o["now_ms"] = now.unix_micros() / 1000;
  o["uptime_seconds"] =
      std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - g.live.started()).count();
  o["config"] = {{"version", g.live.Version()},
                 {"loaded_at", g.live.LoadedAt()},
                 {"generation", g.generation.load()}};
  o["decisions"] = DecisionsJson(g, *pol);
  json::object top{{"window_seconds", kTopWindowSeconds}, {"enabled", g.server.top_offenders}};
  for (const auto& [name, sketch, of] :
       {std::tuple("keys", TopOffenders::kRejectedKeys, "key"),
        std::tuple("addresses", TopOffenders::kRejectedAddresses, "address")}) {
    top[name] = TopItems(MergeTop(g.workers, sketch, kTopWindowSeconds, now_s), of);
  }
  o["top"] = std::move(top);
  for (auto& [name, value] : HealthJson(g)) o[name] = std::move(value);
  if (auto usage = g.live.CachedUsage(now_s)) {  // read less than 10 s ago
    o["usage"] = json::parse(*usage);
    return reply(200, json::serialize(*body));
  }
  // Usage: today's records, then this month's (each may answer on the store's thread).
  const std::string day = core::PeriodLabel(core::Period::kDay, now);
  const std::string month = core::PeriodLabel(core::Period::kMonth, now);
  o["usage"] = {{"day", day}, {"month", month}, {"accounts", json::array()}};
  using Records = core::Result<std::vector<usage::UsageRecord>>;
  usage::UsageMeter& meter = *g.meter;
  LivePage& live = g.live;
  meter.Query(day, "", [&meter, &live, body, pol, now, month, reply = std::move(reply)](Records d) {
    meter.Query(month, "", [&live, body, pol, now, d = std::move(d), reply](Records m) {
      json::object& usage = (*body)["usage"].as_object();
      if (d && m) {
        usage["accounts"] = UsageRows(*pol, now, *d, *m);
        live.CacheUsage(json::serialize(usage), now.unix_micros() / 1'000'000);
      } else {
        usage["error"] = d ? m.error() : d.error();
      }
      reply(200, json::serialize(*body));
    });
  });
}

}  // namespace tollgate::http
