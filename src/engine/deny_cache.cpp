#include <tollgate/engine/deny_cache.hpp>

#include <algorithm>

#include <tollgate/metrics/metrics.hpp>

namespace tollgate::engine {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

}  // namespace

std::array<int64_t, 3> DenyCache::BucketOf(const core::Limit& limit) {
  const auto* b = std::get_if<core::TokenBucket>(&limit.impl());
  if (!b) return {0, 0, 0};
  return {b->capacity(), b->rate().tokens, b->rate().per_micros};
}

DenyCache::DenyCache(store::Store& inner, DenyCacheOptions options, const util::Clock& clock)
    : inner_(inner), options_(options), clock_(clock) {}

bool DenyCache::TryReject(const store::Batch& batch, std::span<core::Decision> decisions,
                          int64_t now_us, store::ApplyResult& result) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(std::string(batch.scope));
  if (it == entries_.end()) return false;
  const Entry& e = it->second;
  if (now_us >= e.trusted_until_us) {  // leases taken before it may have come back since
    entries_.erase(it);
    return false;
  }
  const int64_t elapsed = std::max<int64_t>(0, now_us - e.sent_us);
  bool reject = false;
  for (size_t i = 0; i < batch.checks.size(); ++i) {
    const store::Check& c = batch.checks[i];
    const CheckBound* known = nullptr;
    for (const CheckBound& cb : e.checks) {
      if (cb.limit == c.limit && cb.name == c.name && cb.bucket == BucketOf(*c.limit)) known = &cb;
    }
    if (!known) {
      if (reject) continue;
      // A check we know nothing about: only a rejection elsewhere can decide locally.
      decisions[i] = core::Decision{.limit = c.limit->PolicyQuota()};
      continue;
    }
    decisions[i] = known->last;
    decisions[i].allowed = true;
    decisions[i].code = core::RejectCode::kNone;
    decisions[i].retry_after = core::Duration();
    const auto* bucket = std::get_if<core::TokenBucket>(&c.limit->impl());
    // A smoothing bucket may admit (and delay) past its level: only the store can tell.
    if (!bucket || !c.enforced || c.cost > bucket->capacity() || bucket->smooths()) continue;
    const int64_t unit = bucket->rate().per_micros;
    const int64_t upper = bucket->UpperBoundAfter(known->level_upper, elapsed);
    if (upper >= c.cost * unit) continue;
    core::Decision& d = decisions[i];
    d.allowed = false;
    d.code = core::RejectCode::kRateLimited;
    d.remaining = upper / unit;
    d.reset =
        core::Duration::Micros(CeilDiv(bucket->capacity() * unit - upper, bucket->rate().tokens));
    d.retry_after = core::Duration::Micros(CeilDiv(c.cost * unit - upper, bucket->rate().tokens));
    reject = true;
  }
  if (!reject) return false;
  result.committed = false;
  result.now = core::Instant::FromUnixMicros(e.store_now_us + elapsed);
  return true;
}

void DenyCache::Record(const std::string& scope, std::span<const store::Check> checks,
                       std::span<const core::Decision> decisions, const store::ApplyResult& result,
                       int64_t sent_us) {
  // An upper bound of the tokens a bucket holds, from reset = ceil(deficit / tokens) and
  // remaining = floor(level / unit); 0 for other algorithms.
  auto level_upper = [](const store::Check& c, const core::Decision& d) -> int64_t {
    const auto* bucket = std::get_if<core::TokenBucket>(&c.limit->impl());
    if (!bucket) return 0;
    const int64_t unit = bucket->rate().per_micros;
    const int64_t full = bucket->capacity() * unit;
    const int64_t reset_us = d.reset.micros();
    const int64_t upper =
        std::min(full - std::max<int64_t>(0, reset_us - 1) * bucket->rate().tokens,
                 (d.remaining + 1) * unit - 1);
    return std::clamp<int64_t>(upper, 0, full);
  };
  // Worth remembering only when a request of this cost would not fit now (most answers are
  // not: nothing is built for them).
  bool useful = false;
  for (size_t i = 0; i < checks.size() && !useful; ++i) {
    const store::Check& c = checks[i];
    const auto* bucket = std::get_if<core::TokenBucket>(&c.limit->impl());
    useful =
        bucket && c.enforced &&
        level_upper(c, decisions[i]) < std::max<int64_t>(1, c.cost) * bucket->rate().per_micros;
  }
  if (!useful) {
    std::lock_guard lock(mu_);
    entries_.erase(scope);
    return;
  }
  Entry e{sent_us, result.now.unix_micros(), INT64_MAX, {}};
  for (size_t i = 0; i < checks.size(); ++i) {
    // Issue 31: tokens given back by a lease that ends were hidden until the Retry-After.
    if (checks[i].limit->lease() > 0) e.trusted_until_us = sent_us + options_.leased_bound.micros();
    e.checks.push_back({std::string(checks[i].name), checks[i].limit, BucketOf(*checks[i].limit),
                        level_upper(checks[i], decisions[i]), decisions[i]});
  }
  std::lock_guard lock(mu_);
  if (entries_.size() >= options_.max_entries && !entries_.count(scope)) {
    entries_.erase(entries_.begin());
  }
  entries_[scope] = std::move(e);
}

void DenyCache::Forget(std::string_view scope) {
  std::lock_guard lock(mu_);
  entries_.erase(std::string(scope));
}

void DenyCache::Clear() {
  std::lock_guard lock(mu_);
  entries_.clear();
}

void DenyCache::Apply(const store::Batch& batch, std::span<core::Decision> decisions,
                      Completion done) {
  const int64_t now_us = clock_.SteadyMicros();
  // Its entries are per batch scope: a batch with checks of other scopes (an address's or the
  // route's global budget) would share their bounds between callers. Such batches go straight
  // to the store.
  const bool one_scope = std::all_of(batch.checks.begin(), batch.checks.end(),
                                     [](const store::Check& c) { return c.scope.empty(); });
  if (batch.mode == store::Mode::kConsume && one_scope) {
    store::ApplyResult local;
    if (TryReject(batch, decisions, now_us, local)) {
      stats_.local_rejections.fetch_add(1, std::memory_order_relaxed);
      done(std::move(local));
      return;
    }
  }
  stats_.forwarded.fetch_add(1, std::memory_order_relaxed);
  if (batch.mode != store::Mode::kConsume || !one_scope) {
    inner_.Apply(batch, decisions, std::move(done));
    return;
  }
  inner_.Apply(batch, decisions,
               [this, scope = std::string(batch.scope), checks = batch.checks, decisions, now_us,
                done = std::move(done)](store::ApplyResult&& r) {
                 if (r.error == store::StoreErrc::kOk && r.from_lease) {
                   // Issue 31: a lease's answer says what the store holds besides the lease
                   // (its reset is the store's), so a bound made from it hid the lease's own
                   // tokens: an allowed request from a lease proves only that there were some.
                   Forget(scope);
                 } else if (r.error == store::StoreErrc::kOk) {
                   Record(scope, checks, decisions.first(checks.size()), r, now_us);
                 }
                 done(std::move(r));
               });
}

void DenyCache::ExportMetrics(metrics::Registry& registry) const {
  registry.CounterFrom("tollgate_deny_cache_rejections_total",
                       "Requests rejected locally by the exact deny cache.",
                       metrics::ReadOf(stats_.local_rejections));
}

}  // namespace tollgate::engine
