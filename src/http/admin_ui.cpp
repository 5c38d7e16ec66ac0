// The live page's data (GET /admin/ui, issue 23; its files are ui_assets.hpp's): GET
// /admin/ui/data, everything the page shows in one JSON object. The page polls it each second
// and computes the rates itself from the cumulative counters. Also the configuration's version,
// which the page, the start-up line and the reload line show.
#include <algorithm>
#include <map>
#include <tuple>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <tollgate/config/config.hpp>
#include <tollgate/core/calendar.hpp>
#include <tollgate/core/limit.hpp>
#include <tollgate/util/clock.hpp>
#include <tollgate/util/digest.hpp>
#include <tollgate/util/name_table.hpp>

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

// Usage over a period: cost admitted (what a quota counted) and requests.
struct PeriodUsage {
  usage::UsageCounts counts;
  int64_t Used() const { return counts.cost[0] + counts.cost[1] + counts.cost[2]; }
};

// One row of the page's usage table: one budget that quotas count against (issue 31). A key of a
// plan whose quotas count per key is a row of its own; the keys of one account on a plan whose
// quotas all count per account share a row. Each period shows the quota it is counted against,
// with the usage of every key counting into that quota's counter, whatever its row.
struct BudgetRow {
  std::string account, plan, key_id;  // key_id empty: the row is the account's on this plan
  const policy::Key* key = nullptr;   // one of its keys: its plan's limits (and overrides) apply
  size_t keys = 0;
  bool seen = false;
  PeriodUsage day, month;  // the row's own keys
};

// The quota of `period` of the key's plan (its plan's first), or nullptr.
const policy::NamedLimit* QuotaOf(const policy::Key& key, core::Period period) {
  for (const policy::NamedLimit& l : key.plan->limits) {
    if (l.limit.algorithm() != core::Algorithm::kQuota) continue;
    if (std::get<core::Quota>(l.limit.impl()).period() == period) return &l;
  }
  return nullptr;
}

// The store counter a quota of `key` counts into: one per key or per account, per limit.
std::string CounterOf(const policy::Key& key, const policy::NamedLimit& l) {
  return (l.scope == config::LimitScope::kAccount ? "account:" + key.account : "key:" + key.id) +
         '\0' + l.check_name;
}

bool CountsPerKey(const policy::Key& key) {
  bool quotas = false;
  for (const policy::NamedLimit& l : key.plan->limits) {
    if (l.limit.algorithm() != core::Algorithm::kQuota) continue;
    quotas = true;
    if (l.scope != config::LimitScope::kAccount) return true;
  }
  return !quotas && !key.plan->per_account;
}

using Counters = std::map<std::string, PeriodUsage>;

json::object PeriodJson(const BudgetRow& row, const Counters& counters, core::Period period,
                        core::Instant now) {
  const PeriodUsage& own = period == core::Period::kDay ? row.day : row.month;
  const policy::NamedLimit* quota = row.key ? QuotaOf(*row.key, period) : nullptr;
  const PeriodUsage* shown = &own;
  if (quota) {
    const auto it = counters.find(CounterOf(*row.key, *quota));
    if (it != counters.end()) shown = &it->second;
  }
  const usage::UsageCounts& c = shown->counts;
  json::object o{{"used", shown->Used()},
                 {"requests", c.requests[0] + c.requests[1] + c.requests[2]},
                 {"rejected", c.requests[3]},
                 {"allowance", nullptr},
                 {"ceiling", nullptr}};
  if (!quota) return o;
  const size_t index = static_cast<size_t>(quota - row.key->plan->limits.data());
  const auto& q = std::get<core::Quota>(row.key->LimitAt(index, now).impl());
  o["allowance"] = OrNull(q.allowance());
  o["ceiling"] = OrNull(q.ceiling());
  o["per"] = quota->scope == config::LimitScope::kAccount ? "account" : "key";
  return o;
}

json::array UsageRows(const policy::Policy& pol, core::Instant now,
                      const std::vector<usage::UsageRecord>& day,
                      const std::vector<usage::UsageRecord>& month) {
  std::map<std::string, BudgetRow> rows;
  Counters counters[2];  // day, month
  auto add = [&](const usage::UsageRecord& r, bool is_month) {
    const policy::Key* key = pol.FindById(r.key_id);
    const bool per_key = !key || CountsPerKey(*key);
    const std::string plan = key ? key->plan->name : "";
    BudgetRow& row = rows[r.account + '\0' + plan + '\0' + (per_key ? r.key_id : "")];
    if (!row.seen) {
      row.seen = true;
      row.account = r.account;
      row.plan = plan;
      if (per_key) row.key_id = r.key_id;
    }
    if (!row.key) row.key = key;
    (is_month ? row.month : row.day).counts.Add(r.counts);
    if (is_month) ++row.keys;
    if (!key) return;
    const core::Period period = is_month ? core::Period::kMonth : core::Period::kDay;
    for (const policy::NamedLimit& l : key->plan->limits) {
      if (l.limit.algorithm() != core::Algorithm::kQuota ||
          std::get<core::Quota>(l.limit.impl()).period() != period) {
        continue;
      }
      counters[is_month][CounterOf(*key, l)].counts.Add(r.counts);
    }
  };
  for (const auto& r : month) add(r, true);
  for (const auto& r : day) add(r, false);
  std::vector<const BudgetRow*> order;
  for (const auto& entry : rows) order.push_back(&entry.second);
  std::stable_sort(order.begin(), order.end(), [](const BudgetRow* a, const BudgetRow* b) {
    return a->month.Used() > b->month.Used();
  });
  if (order.size() > kMaxUsageRows) order.resize(kMaxUsageRows);
  json::array out;
  for (const BudgetRow* row : order) {
    out.push_back(
        json::object{{"account", row->account},
                     {"key", row->key_id.empty() ? json::value(nullptr) : json::value(row->key_id)},
                     {"plan", row->plan},
                     {"keys", row->keys},
                     {"day", PeriodJson(*row, counters[0], core::Period::kDay, now)},
                     {"month", PeriodJson(*row, counters[1], core::Period::kMonth, now)}});
  }
  return out;
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
// Each upstream group and the state of its endpoints (issue 33): `admitted`, `ejected` (passive
// health, for ejected_ms more) or `failing_checks` (active health).
json::array UpstreamsJson(const Gateway::Impl& g) {
  json::array out;
  const int64_t now = BalancerNow();
  for (const auto& group : g.groups) {
    json::array endpoints;
    for (size_t i = 0; i < group->endpoints.size(); ++i) {
      const Balancer::View v = group->balancer.Read(i, now);
      endpoints.push_back({{"url", group->endpoints[i].config.url},
                           {"state", v.admitted        ? "admitted"
                                     : v.check_healthy ? "ejected"
                                                       : "failing_checks"},
                           {"ejected_ms", v.ejected_for_ms},
                           {"ejections", v.ejections},
                           {"outstanding", v.outstanding},
                           {"requests", v.requests}});
    }
    out.push_back({{"group", group->config.name},
                   {"balance", util::NameOf(config::kBalanceNames, group->config.balance)},
                   {"endpoints", std::move(endpoints)}});
  }
  return out;
}

// The client connections open now, and HTTP/2's totals (issue 34): connections by protocol,
// streams, resets received, GOAWAYs sent.
json::object ConnectionsJson(Gateway::Impl& g) {
  auto total = [&](std::string_view name, std::string_view labels = {}) {
    return g.metrics.Counter(name, labels).load(std::memory_order_relaxed);
  };
  uint64_t goaways = 0;
  for (const char* e : {"no_error", "protocol_error", "enhance_your_calm", "other"})
    goaways += total("tollgate_http2_goaways_sent_total", std::string("error=\"") + e + "\"");
  return json::object{{"open", g.connections.OpenApprox()},
                      {"h2_total", total("tollgate_http2_connections_total", "protocol=\"h2\"")},
                      {"h2c_total", total("tollgate_http2_connections_total", "protocol=\"h2c\"")},
                      {"streams_total", total("tollgate_http2_streams_total")},
                      {"resets_received_total", total("tollgate_http2_resets_received_total")},
                      {"goaways_sent_total", goaways}};
}

json::object HealthJson(Gateway::Impl& g) {
  const bool ready = g.store_ready.load(std::memory_order_relaxed);
  const store::StoreStatus status = g.store.Status();
  // A store with connections and failures.
  const bool shared =
      util::ValueOf(config::kStoreTypeNames, status.type) != config::StoreType::kMemory;
  json::object store{{"type", status.type},
                     {"status", !ready                ? "unavailable"
                                : status.breaker_open ? "breaker_open"
                                                      : "ok"},
                     {"degraded_total", g.engine->stats().degraded.load()},
                     {"unavailable_total", g.engine->stats().unavailable.load()}};
  if (shared) {
    store["timeouts_total"] = status.timeouts;
    store["errors_total"] = status.errors;
    store["last_error"] = status.last_error;
  }
  const config::KeySourceType source =
      g.key_source ? config::KeySourceType::kPostgres : config::KeySourceType::kFile;
  json::object keys{{"type", util::NameOf(config::kKeySourceTypeNames, source)}, {"status", "ok"}};
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
  return json::object{{"store", std::move(store)},
                      {"key_source", std::move(keys)},
                      {"upstreams", UpstreamsJson(g)}};
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

std::string_view AdminBrowserRefusal(std::string_view host, std::string_view origin,
                                     std::string_view fetch_site) {
  if (fetch_site == "cross-site" || fetch_site == "same-site") return "a request from another site";
  if (!origin.empty()) {
    const size_t scheme = origin.find("://");
    if (scheme == std::string_view::npos || origin.substr(scheme + 3) != host) {
      return "a request from another origin";
    }
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
  o["connections"] = ConnectionsJson(g);
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
