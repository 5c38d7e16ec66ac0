#include <tollgate/engine/engine.hpp>

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
    if (request.fail_mode == FailMode::kOpen) {
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
                 done(Conclude(request, decisions, r));
               });
}

}  // namespace tollgate::engine
