#include <tollgate/engine/engine.hpp>

#include <algorithm>
#include <limits>
#include <vector>

namespace tollgate::engine {
namespace {

// A soft allowance never limits: it is not a candidate for the single-policy headers.
bool CanLimit(const store::Check& c) {
  if (const auto* q = std::get_if<core::Quota>(&c.limit->impl())) {
    return q->ceiling().has_value() && !q->allowance().has_value();
  }
  return true;
}

}  // namespace

Verdict Combine(std::span<const store::Check> checks, std::span<const core::Decision> decisions) {
  Verdict v;
  int nearest = -1;
  for (size_t i = 0; i < checks.size(); ++i) {
    const core::Decision& d = decisions[i];
    const int index = static_cast<int>(i);
    if (!checks[i].enforced) {
      if (!d.allowed) ++v.shadow_rejections;
      continue;
    }
    if (!d.allowed) {
      if (v.kind != Verdict::Kind::kRejected || d.retry_after > v.retry_after) {
        v.primary = index;
        v.retry_after = d.retry_after;
        v.code = d.code;
      }
      v.kind = Verdict::Kind::kRejected;
    } else {
      if (d.delay > v.delay) v.delay = d.delay;
      if (CanLimit(checks[i]) &&
          (nearest < 0 || d.remaining < decisions[static_cast<size_t>(nearest)].remaining)) {
        nearest = index;
      }
    }
  }
  if (v.kind == Verdict::Kind::kAllowed) {
    v.primary = nearest;
  } else {
    v.delay = core::Duration();
  }
  return v;
}

Verdict Engine::Conclude(const Request& request, std::span<const core::Decision> decisions,
                         const store::ApplyResult& result) {
  Verdict v;
  if (result.error != store::StoreErrc::kOk) {
    v.store_error = result.error;
    if (request.fail_mode != FailMode::kClosed) {
      v.kind = Verdict::Kind::kDegraded;
      stats_.degraded.fetch_add(1, std::memory_order_relaxed);
    } else {
      v.kind = Verdict::Kind::kUnavailable;
      v.retry_after = core::Duration::Seconds(1);
      stats_.unavailable.fetch_add(1, std::memory_order_relaxed);
    }
    return v;
  }
  const auto checks = request.batch.checks;
  v = Combine(checks, decisions.first(checks.size()));
  v.now = result.now;
  (v.allowed() ? stats_.allowed : stats_.rejected).fetch_add(1, std::memory_order_relaxed);
  if (v.shadow_rejections > 0) stats_.shadow_rejected.fetch_add(1, std::memory_order_relaxed);
  return v;
}

void Engine::Decide(const Request& request, std::span<core::Decision> decisions,
                    std::function<void(Verdict)> done) {
  store_.Apply(request.batch, decisions,
               [this, request, decisions, done = std::move(done)](store::ApplyResult&& r) {
                 if (r.error != store::StoreErrc::kOk && request.fail_mode == FailMode::kLocal &&
                     local_ != nullptr) {
                   return DecideLocally(request, decisions, r.error, done);
                 }
                 done(Conclude(request, decisions, r));
               });
}

void Engine::DecideLocally(const Request& request, std::span<core::Decision> decisions,
                           store::StoreErrc error, const std::function<void(Verdict)>& done) {
  // Each replica spends its share: a cost of c counts as c x replicas against the whole limit,
  // which is the same as c against limit / replicas (capacity, refill, window count, quota).
  const int64_t replicas = std::max(1, replicas_ ? replicas_() : 1);
  std::vector<store::Check> checks(request.batch.checks.begin(), request.batch.checks.end());
  for (store::Check& c : checks) {  // a cost from a client's query may be huge: saturate
    c.cost = c.cost > std::numeric_limits<int64_t>::max() / replicas
                 ? std::numeric_limits<int64_t>::max()
                 : c.cost * replicas;
  }
  store::Batch batch = request.batch;
  batch.checks = checks;
  const store::ApplyResult r = local_->ApplyNow(batch, decisions);
  Verdict v;
  if (r.error != store::StoreErrc::kOk) {  // the memory store refused the batch: as kOpen
    v.kind = Verdict::Kind::kDegraded;
    stats_.degraded.fetch_add(1, std::memory_order_relaxed);
  } else {
    for (size_t i = 0; i < checks.size(); ++i) {
      core::Decision& d = decisions[i];
      d.limit /= replicas;
      d.remaining /= replicas;
      d.used /= replicas;
    }
    v = Combine(request.batch.checks, decisions.first(checks.size()));
    v.now = r.now;
    v.local = true;
    (v.allowed() ? stats_.local_allowed : stats_.local_rejected)
        .fetch_add(1, std::memory_order_relaxed);
    if (v.shadow_rejections > 0) stats_.shadow_rejected.fetch_add(1, std::memory_order_relaxed);
  }
  v.store_error = error;
  done(v);
}

}  // namespace tollgate::engine
