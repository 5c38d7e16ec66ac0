#include <tollgate/store/leasing_store.hpp>

#include <algorithm>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include <tollgate/core/token_bucket.hpp>
#include <tollgate/metrics/metrics.hpp>
#include <tollgate/util/hash.hpp>

namespace tollgate::store {

LeasingStore::LeasingStore(Store& inner, std::function<void(const Unspent&)> give_back,
                           Options options, const util::Clock& clock)
    : inner_(inner), give_back_(std::move(give_back)), options_(options), clock_(clock) {}

LeasingStore::~LeasingStore() = default;

const Check* LeasingStore::Leasable(const Batch& batch) {
  if (batch.mode != Mode::kConsume || batch.checks.size() != 1 || batch.now.has_value()) {
    return nullptr;
  }
  const Check& c = batch.checks[0];
  const int64_t n = c.limit->lease();
  return n > 0 && c.enforced && c.cost > 0 && c.cost <= n ? &c : nullptr;
}

LeasingStore::Shard& LeasingStore::ShardOf(std::string_view key) {
  return shards_[util::Hash64(key) % kShards];
}

void LeasingStore::Spend(Lease& lease, const Batch& batch, std::span<core::Decision> decisions) {
  lease.tokens -= batch.checks[0].cost;
  core::Decision& d = decisions[0];
  d = lease.granted;
  d.remaining = std::min(d.limit, lease.store_remaining + lease.tokens);
}

void LeasingStore::Apply(const Batch& batch, std::span<core::Decision> decisions, Completion done) {
  const Check* check = Leasable(batch);
  if (check == nullptr) return inner_.Apply(batch, decisions, std::move(done));
  const std::string_view scope = check->scope.empty() ? batch.scope : check->scope;
  std::string key;
  key.reserve(scope.size() + 1 + check->name.size());
  key.append(scope).append(1, '\0').append(check->name);
  const int64_t now = clock_.SteadyMicros();
  Shard& shard = ShardOf(key);
  Unspent expired;
  {
    std::unique_lock lock(shard.mu);
    Lease& lease = shard.leases[key];
    if (now < lease.expires_us && lease.tokens >= check->cost) {
      Spend(lease, batch, decisions);
      lock.unlock();
      stats_.local.fetch_add(1, std::memory_order_relaxed);
      ApplyResult r;
      r.committed = true;
      r.now = clock_.Now();
      r.from_lease = true;
      return done(std::move(r));
    }
    if (lease.granting) {
      lease.waiting.push_back({batch, decisions, std::move(done)});
      stats_.waited.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (now < lease.refused_until_us) {
      lock.unlock();
      stats_.exact.fetch_add(1, std::memory_order_relaxed);
      return inner_.Apply(batch, decisions, std::move(done));
    }
    lease.granting = true;
    if (now >= lease.expires_us && lease.tokens > 0) {  // expired, not yet swept
      expired = lease.unspent;
      expired.tokens = std::exchange(lease.tokens, 0);
    }
  }
  if (expired.tokens > 0) GiveBack({&expired, 1});
  Grant(batch, *check, std::move(key), decisions, std::move(done));
}

void LeasingStore::Grant(const Batch& batch, const Check& check, std::string key,
                         std::span<core::Decision> decisions, Completion done) {
  auto call = std::make_shared<GrantCall>();
  call->check = check;
  call->check.cost = check.limit->lease();
  call->batch = batch;
  call->batch.checks = {&call->check, 1};
  Lease::Waiting first{batch, decisions, std::move(done)};
  inner_.Apply(call->batch, {&call->decision, 1},
               [this, call, key = std::move(key), first = std::move(first)](
                   ApplyResult&& r) mutable { Granted(*call, key, std::move(first), r); });
}

void LeasingStore::Granted(const GrantCall& call, const std::string& key, Lease::Waiting first,
                           const ApplyResult& r) {
  const int64_t now = clock_.SteadyMicros();
  Shard& shard = ShardOf(key);
  std::vector<Lease::Waiting> answered, exact;
  std::vector<Lease::Waiting> all;
  {
    std::lock_guard lock(shard.mu);
    Lease& lease = shard.leases[key];
    lease.granting = false;
    all = std::exchange(lease.waiting, {});
    all.insert(all.begin(), std::move(first));
    if (r.error == StoreErrc::kOk && call.decision.allowed) {
      const auto& tb = std::get<core::TokenBucket>(call.check.limit->impl());
      lease.tokens += call.check.cost;
      lease.granted = call.decision;
      lease.store_remaining = call.decision.remaining;
      lease.expires_us = now + options_.ttl.micros();
      lease.unspent = {.scope = key.substr(0, key.find('\0')),
                       .name = std::string(call.check.name),
                       .unit = tb.rate().per_micros,
                       .rate = tb.rate().tokens};
      for (Lease::Waiting& w : all) {
        if (lease.tokens >= w.batch.checks[0].cost) {
          Spend(lease, w.batch, w.decisions);
          answered.push_back(std::move(w));
        } else {
          exact.push_back(std::move(w));
        }
      }
    } else if (r.error == StoreErrc::kOk) {
      // Not N tokens: exact, until N could be granted.
      lease.refused_until_us = now + call.decision.retry_after.micros();
      exact = std::move(all);
    }
  }
  if (r.error != StoreErrc::kOk) {  // the route's fail mode decides, for each of them
    for (Lease::Waiting& w : all) w.done(ApplyResult{r});
    return;
  }
  if (call.decision.allowed) {
    stats_.grants.fetch_add(1, std::memory_order_relaxed);
  } else {
    stats_.refused.fetch_add(1, std::memory_order_relaxed);
  }
  stats_.local.fetch_add(answered.size() - (answered.empty() ? 0 : 1), std::memory_order_relaxed);
  for (Lease::Waiting& w : answered) {
    ApplyResult ok;
    ok.committed = true;
    ok.now = r.now;
    ok.from_lease = true;
    w.done(std::move(ok));
  }
  stats_.exact.fetch_add(exact.size(), std::memory_order_relaxed);
  for (Lease::Waiting& w : exact) inner_.Apply(w.batch, w.decisions, std::move(w.done));
}

void LeasingStore::Sweep() {
  const int64_t now = clock_.SteadyMicros();
  std::vector<Unspent> unspent;
  for (Shard& shard : shards_) {
    std::lock_guard lock(shard.mu);
    for (auto it = shard.leases.begin(); it != shard.leases.end();) {
      Lease& lease = it->second;
      if (lease.granting || now < lease.expires_us) {
        ++it;
        continue;
      }
      if (lease.tokens > 0) {  // expired: its tokens go back, refused or not
        unspent.push_back(lease.unspent);
        unspent.back().tokens = std::exchange(lease.tokens, 0);
      }
      // A refusal is remembered until it passes (the key goes to the store exactly until then).
      it = now >= lease.refused_until_us ? shard.leases.erase(it) : std::next(it);
    }
  }
  GiveBack(unspent);
}

void LeasingStore::Forget() {
  for (Shard& shard : shards_) {
    std::lock_guard lock(shard.mu);
    for (auto it = shard.leases.begin(); it != shard.leases.end();) {
      it = it->second.granting ? std::next(it) : shard.leases.erase(it);
    }
  }
}

void LeasingStore::GiveBack(std::span<const Unspent> unspent) {
  for (const Unspent& u : unspent) {
    stats_.given_back.fetch_add(static_cast<uint64_t>(u.tokens), std::memory_order_relaxed);
    give_back_(u);
  }
}

void LeasingStore::ExportMetrics(metrics::Registry& registry) const {
  using metrics::ReadOf;
  registry.CounterFrom("tollgate_lease_local_total",
                       "Requests answered from a token lease, without a store call.",
                       ReadOf(stats_.local));
  registry.CounterFrom("tollgate_lease_grants_total", "Token leases taken from the store.",
                       ReadOf(stats_.grants));
  registry.CounterFrom("tollgate_lease_refused_total",
                       "Lease requests the store could not grant in full (then exact).",
                       ReadOf(stats_.refused));
  registry.CounterFrom("tollgate_lease_exact_total",
                       "Requests of a leased limit sent to the store as they were (a grant in "
                       "flight, or none possible).",
                       ReadOf(stats_.exact));
  registry.CounterFrom("tollgate_lease_waited_total",
                       "Requests of a leased limit that waited for a grant in flight.",
                       ReadOf(stats_.waited));
  registry.CounterFrom("tollgate_lease_given_back_tokens_total",
                       "Unspent leased tokens given back to the store.", ReadOf(stats_.given_back));
}

}  // namespace tollgate::store
