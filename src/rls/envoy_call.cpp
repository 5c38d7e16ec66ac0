// Domains of rls.envoy_config: envoyproxy/ratelimit's matching, decided by tollgate's engine.
// The limited descriptors of one call are one all-or-nothing batch (when the store can span
// scopes): a call rejected by one descriptor consumes none of the others.
#include <algorithm>
#include <map>
#include <set>

#include <tollgate/contract/contract.hpp>
#include <tollgate/util/clock.hpp>

#include "rls/call.hpp"

namespace tollgate::rls::internal {
namespace {

using config::EnvoyUnit;

// Where a descriptor's counter lives: its domain and entries, length-prefixed so that no two
// descriptors share one ("a_b"="c" and "a"="b_c" stay apart).
std::string ScopeOf(std::string_view domain, config::EnvoyEntries entries) {
  std::string s = "rls:" + std::to_string(domain.size()) + ":";
  s.append(domain);
  for (const auto& [k, v] : entries) {
    s.append("|").append(std::to_string(k.size())).append(":").append(k);
    s.append(std::to_string(v.size())).append(":").append(v);
  }
  return s;
}

class Envoy final : public Call {
 public:
  Envoy(const ServerContext& server, std::shared_ptr<const EnvoySnapshot> snapshot,
        const config::EnvoyDomain& domain, const pb::RateLimitRequest& request,
        pb::RateLimitResponse& response, Done done)
      : Call(server, request, response, std::move(done)),
        snapshot_(std::move(snapshot)),
        domain_(domain) {}

 private:
  // A descriptor that matched a rate limit (or brought its own, field 2).
  struct Limited {
    int status = 0;
    const config::EnvoyRateLimit* config = nullptr;  // null: the descriptor's own limit
    std::optional<core::Limit> own;
    const core::Limit* limit = nullptr;  // null: unlimited, or 0 requests per unit
    bool unlimited = false;
    uint32_t requests_per_unit = 0;
    EnvoyUnit unit = EnvoyUnit::kSecond;
    bool shadow = false;
    int64_t cost = 1;
    DescriptorCounters counters;
    std::string scope;
    std::string check_name;
    Group* group = nullptr;
    size_t index = 0;         // its check in `group`
    Limited* same = nullptr;  // a descriptor twice in one call: decided once, by `same`
    bool replaced = false;    // named by another matched limit's `replaces`: not evaluated
  };

  DescriptorCounters Counters(const config::EnvoyMatch& m) {
    if (!m.descriptor->detailed_metric) return snapshot_->counters.at(m.descriptor);
    // A series per request value, bounded: past the bound, the entry's own series.
    constexpr uint64_t kMaxDetailedSeries = 10'000;
    if (server_.detailed_series.fetch_add(1, std::memory_order_relaxed) >= kMaxDetailedSeries)
      return snapshot_->counters.at(m.descriptor);
    return CountersFor(server_.registry, domain_.domain, m.stat_key);
  }

  std::string Prepare() override {
    std::vector<std::pair<std::string_view, std::string_view>> entries;
    for (int i = 0; i < request_.descriptors_size(); ++i) {
      const pb::RateLimitDescriptor& desc = request_.descriptors(i);
      response_.add_statuses()->set_code(pb::RateLimitResponse::OK);
      entries.clear();
      for (const auto& e : desc.entries()) entries.emplace_back(e.key(), e.value());
      // In place: an override's `limit` points into its own `own`.
      Limited& l = limited_.emplace_back();
      l.status = i;
      l.cost = CostOf(request_, desc);
      if (desc.has_limit()) {
        if (std::string error = Override(desc.limit(), entries, l); !error.empty())
          return "descriptors[" + std::to_string(i) + "].limit." + error;
      } else if (!Configured(entries, l)) {
        limited_.pop_back();  // nothing limits it: OK
        continue;
      }
      l.shadow = l.shadow || server_.options.shadow_mode;
      l.scope = ScopeOf(domain_.domain, entries);
    }
    // replaces: a limit named by another matched limit's `replaces` is not evaluated.
    std::set<std::string_view> replaced;
    for (const Limited& l : limited_) {
      if (l.config) replaced.insert(l.config->replaces.begin(), l.config->replaces.end());
    }
    for (Limited& l : limited_) {
      l.replaced = l.config && !l.config->name.empty() && replaced.count(l.config->name);
    }
    return MakeGroups();
  }

  // Envoy's per-route override (RateLimitDescriptor.limit): its rate, counted as upstream does
  // (no shadow mode), under the entry the descriptor matches, if any.
  std::string Override(const pb::RateLimitDescriptor::RateLimitOverride& o,
                       config::EnvoyEntries entries, Limited& l) {
    const auto unit = config::EnvoyUnitFromNumber(o.unit());
    if (!unit) return "unit: unknown unit " + std::to_string(o.unit());
    l.unit = *unit;
    l.requests_per_unit = o.requests_per_unit();
    if (l.requests_per_unit > 0) {
      l.own = *core::Limit::Create({.algorithm = core::Algorithm::kFixedWindow,
                                    .limit = l.requests_per_unit,
                                    .window = core::Duration::Seconds(EnvoyUnitSeconds(l.unit))});
      l.limit = &*l.own;
    }
    l.check_name = "envoy-override:" + std::string(EnvoyUnitName(l.unit));
    const config::EnvoyMatch m = config::EnvoyRlsConfig::Match(domain_, entries);
    if (m.descriptor) l.counters = Counters(m);
    return {};
  }

  // The configured entry the descriptor matches; false when none.
  bool Configured(config::EnvoyEntries entries, Limited& l) {
    const config::EnvoyMatch m = config::EnvoyRlsConfig::Match(domain_, entries);
    if (!m.descriptor) return false;
    const config::EnvoyRateLimit& rl = *m.descriptor->rate_limit;
    l.config = &rl;
    l.unlimited = rl.unlimited;
    l.requests_per_unit = rl.requests_per_unit;
    l.unit = rl.unit;
    l.limit = rl.limit ? &*rl.limit : nullptr;
    l.shadow = m.descriptor->shadow_mode;
    l.counters = Counters(m);
    l.check_name = "envoy:" + std::string(EnvoyUnitName(rl.unit)) + ":" +
                   std::string(core::AlgorithmName(rl.algorithm));
    return true;
  }

  // The checks: one per distinct (descriptor, limit), a repeated descriptor adding its cost; all
  // in one group when the store can span scopes, else one group each.
  std::string MakeGroups() {
    std::map<std::pair<std::string_view, const core::Limit*>, Limited*> seen;
    std::vector<Limited*> decided;
    for (Limited& l : limited_) {
      if (!l.limit || l.replaced) continue;
      auto [it, fresh] = seen.try_emplace({l.scope, l.limit}, &l);
      if (!fresh) {
        l.same = it->second;
        it->second->cost = std::min<int64_t>(it->second->cost + l.cost, INT32_MAX);
        continue;
      }
      decided.push_back(&l);
    }
    const bool together = server_.options.store_spans_scopes;
    if (together && decided.size() > engine::kMaxChecks) {
      return "at most " + std::to_string(engine::kMaxChecks) +
             " rate-limited descriptors in one call, got " + std::to_string(decided.size());
    }
    Group* group = nullptr;
    for (Limited* l : decided) {
      if (!group || !together) {
        group = &AddGroup();
        group->scope = l->scope;
      }
      l->group = group;
      l->index = group->n++;
      group->checks[l->index] = store::Check{
          .name = l->check_name,
          .limit = l->limit,
          .cost = l->cost,
          .enforced = !l->shadow,
          .scope = l->scope == group->scope ? std::string_view() : std::string_view(l->scope),
          .may_delay = false};
    }
    return {};
  }

  void Answer() override {
    const int64_t now_s = util::SystemClock::Instance().Now().unix_micros() / 1'000'000;
    const Limited* headline = nullptr;  // the descriptor the response headers describe:
    bool headline_rejects = false;      // the first that rejects, else the one with least left
    int64_t headline_remaining = 0;
    bool overridden = false;  // an OVER_LIMIT answered OK by rls.shadow_mode
    for (const Limited& l : limited_) {
      if (l.replaced) continue;
      pb::RateLimitResponse::DescriptorStatus* status = response_.mutable_statuses(l.status);
      const auto add = [](std::atomic<uint64_t>* c, int64_t n) {
        if (c) c->fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      };
      add(l.counters.hits, l.cost);
      if (l.unlimited) {
        add(l.counters.within_limit, l.cost);
        status->set_limit_remaining(UINT32_MAX);
        continue;
      }
      auto* current = status->mutable_current_limit();
      if (l.config) current->set_name(l.config->name);
      current->set_requests_per_unit(l.requests_per_unit);
      current->set_unit(static_cast<pb::RateLimitResponse::RateLimit::Unit>(l.unit));
      const int64_t unit_s = EnvoyUnitSeconds(l.unit);
      bool over = true;  // 0 requests per unit: always over the limit, no store call
      int64_t remaining = 0;
      int64_t until = unit_s - now_s % unit_s;
      if (l.limit) {
        const Limited& d = l.same ? *l.same : l;
        const engine::Verdict& v = d.group->verdict;
        if (v.kind == engine::Verdict::Kind::kDegraded ||
            v.kind == engine::Verdict::Kind::kUnavailable) {
          // The store failed: fail open, as a call Envoy could not make would.
          status->clear_current_limit();
          continue;
        }
        const core::Decision& dec = d.group->decisions[d.index];
        over = !dec.allowed;
        remaining = dec.remaining;
        // Rejected by another descriptor: the stores answer what is left, nothing consumed.
        const core::Duration wait =
            over && !dec.retry_after.IsInfinite() ? dec.retry_after : dec.reset;
        until = wait.CeilSeconds();
      }
      status->set_limit_remaining(
          static_cast<uint32_t>(std::clamp<int64_t>(remaining, 0, UINT32_MAX)));
      status->mutable_duration_until_reset()->set_seconds(until);
      if (over) {
        add(l.counters.over_limit, l.cost);
        if (l.shadow) {
          add(l.counters.shadow_mode, l.cost);
          overridden = overridden || server_.options.shadow_mode;
        } else {
          status->set_code(pb::RateLimitResponse::OVER_LIMIT);
          response_.set_overall_code(pb::RateLimitResponse::OVER_LIMIT);
        }
      } else {
        add(l.counters.within_limit, l.cost);
        if (static_cast<double>(l.requests_per_unit - remaining) >
            server_.options.near_limit_ratio * l.requests_per_unit)
          add(l.counters.near_limit, l.cost);
      }
      const bool rejects = over && !l.shadow;
      if (l.limit && (!headline || (rejects && !headline_rejects) ||
                      (rejects == headline_rejects && remaining < headline_remaining))) {
        headline = &l;
        headline_rejects = rejects;
        headline_remaining = remaining;
      }
    }
    if (overridden && response_.overall_code() == pb::RateLimitResponse::OK)
      server_.stats.shadow_ok.fetch_add(1, std::memory_order_relaxed);
    if (server_.options.response_headers && headline) AddHeaders(*headline);
  }

  // The RateLimit fields of the descriptor closest to its limit, as the gateway writes them.
  void AddHeaders(const Limited& l) {
    const Limited& d = l.same ? *l.same : l;
    const Group& g = *d.group;
    const contract::AnswerOptions answer{.headers = &server_.options.headers};
    contract::HeaderList headers;
    std::string body;
    // Only this descriptor's check, so that the fields describe it.
    const store::Check& check = g.checks[d.index];
    const core::Decision& dec = g.decisions[d.index];
    const engine::Verdict v = engine::Combine({&check, 1}, {&dec, 1});
    (void)contract::Respond(v, {&check, 1}, {&dec, 1}, true, answer, headers, body);
    AddResponseHeaders(headers, response_);
  }

  std::shared_ptr<const EnvoySnapshot> snapshot_;
  const config::EnvoyDomain& domain_;
  std::deque<Limited> limited_;
};

}  // namespace

std::unique_ptr<Call> EnvoyCall(const ServerContext& server,
                                std::shared_ptr<const EnvoySnapshot> snapshot,
                                const config::EnvoyDomain& domain,
                                const pb::RateLimitRequest& request,
                                pb::RateLimitResponse& response, Done done) {
  return std::make_unique<Envoy>(server, std::move(snapshot), domain, request, response,
                                 std::move(done));
}

}  // namespace tollgate::rls::internal
