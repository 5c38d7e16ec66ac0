#include "upstream_balancer.hpp"

#include <algorithm>

namespace tollgate::http {

Balancer::Balancer(config::Balance balance, config::PassiveHealthConfig passive, size_t endpoints)
    : balance_(balance),
      passive_(passive),
      size_(endpoints),
      endpoints_(std::make_unique<Endpoint[]>(endpoints)) {}

bool Balancer::Admitted(size_t i, int64_t now_ms) const {
  const Endpoint& e = endpoints_[i];
  return e.check_healthy.load(std::memory_order_relaxed) &&
         e.ejected_until_ms.load(std::memory_order_relaxed) <= now_ms;
}

std::optional<size_t> Balancer::Pick(int64_t now_ms, Tried tried) {
  // One endpoint (the `upstream:` section): no turn to take, no shared counter to touch.
  if (size_ == 1) {
    if ((tried & 1) || !Admitted(0, now_ms)) return std::nullopt;
    return 0;
  }
  const size_t start = turn_.fetch_add(1, std::memory_order_relaxed) % size_;
  std::optional<size_t> best;
  int64_t best_outstanding = 0;
  for (size_t k = 0; k < size_; ++k) {
    const size_t i = (start + k) % size_;
    if ((tried >> i & 1) || !Admitted(i, now_ms)) continue;
    if (balance_ == config::Balance::kRoundRobin) return i;
    // Least outstanding: every candidate looked at (a group is small), ties to the first in
    // turn, so that idle endpoints share the load evenly.
    const int64_t o = endpoints_[i].outstanding.load(std::memory_order_relaxed);
    if (!best || o < best_outstanding) {
      best = i;
      best_outstanding = o;
    }
  }
  return best;
}

void Balancer::Begin(size_t i) {
  endpoints_[i].outstanding.fetch_add(1, std::memory_order_relaxed);
  endpoints_[i].requests.fetch_add(1, std::memory_order_relaxed);
}

void Balancer::End(size_t i) { endpoints_[i].outstanding.fetch_sub(1, std::memory_order_relaxed); }

bool Balancer::Report(size_t i, bool ok, int64_t now_ms) {
  Endpoint& e = endpoints_[i];
  if (ok) {
    // Read first: a healthy endpoint's line stays shared by the threads rather than written.
    if (e.failures.load(std::memory_order_relaxed) != 0)
      e.failures.store(0, std::memory_order_relaxed);
    return false;
  }
  const uint32_t threshold = static_cast<uint32_t>(passive_.consecutive_failures);
  // Off, or out already: the failures of requests that began before the ejection add nothing.
  if (threshold == 0 || e.ejected_until_ms.load(std::memory_order_relaxed) > now_ms) return false;
  uint32_t n = e.failures.fetch_add(1, std::memory_order_relaxed) + 1;
  // One of the workers that see the threshold ejects: the one that resets the count.
  if (n < threshold || !e.failures.compare_exchange_strong(n, 0, std::memory_order_relaxed))
    return false;
  // The back-off doubles at each ejection, and starts over once the endpoint stayed admitted
  // for max_ejection_ms since it came back.
  const int64_t back_since = e.ejected_until_ms.load(std::memory_order_relaxed);
  uint32_t level = e.level.load(std::memory_order_relaxed);
  if (back_since != 0 && now_ms - back_since >= passive_.max_ejection_ms) level = 0;
  level = std::min<uint32_t>(level + 1, 32);
  const int64_t base = passive_.base_ejection_ms;
  const int64_t ms = std::min<int64_t>(passive_.max_ejection_ms, base << (level - 1));
  e.level.store(level, std::memory_order_relaxed);
  e.ejected_until_ms.store(now_ms + ms, std::memory_order_relaxed);
  e.ejections.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool Balancer::ReportCheck(size_t i, bool healthy, int unhealthy_threshold, int healthy_threshold) {
  Endpoint& e = endpoints_[i];
  const bool was = e.check_healthy.load(std::memory_order_relaxed);
  if (healthy == was) {
    e.check_streak.store(0, std::memory_order_relaxed);
    return false;
  }
  const uint32_t streak = e.check_streak.fetch_add(1, std::memory_order_relaxed) + 1;
  if (streak < static_cast<uint32_t>(healthy ? healthy_threshold : unhealthy_threshold))
    return false;
  e.check_streak.store(0, std::memory_order_relaxed);
  e.check_healthy.store(healthy, std::memory_order_relaxed);
  if (healthy) return false;
  e.ejections.fetch_add(1, std::memory_order_relaxed);
  return true;
}

int64_t Balancer::MsUntilAdmission(int64_t now_ms, int64_t check_interval_ms) const {
  int64_t soonest = INT64_MAX;
  for (size_t i = 0; i < size_; ++i) {
    const Endpoint& e = endpoints_[i];
    if (Admitted(i, now_ms)) return 0;
    const int64_t wait = e.check_healthy.load(std::memory_order_relaxed)
                             ? e.ejected_until_ms.load(std::memory_order_relaxed) - now_ms
                             : check_interval_ms;
    soonest = std::min(soonest, wait);
  }
  return soonest;
}

Balancer::View Balancer::Read(size_t i, int64_t now_ms) const {
  const Endpoint& e = endpoints_[i];
  View v;
  v.admitted = Admitted(i, now_ms);
  v.check_healthy = e.check_healthy.load(std::memory_order_relaxed);
  v.ejected_for_ms =
      std::max<int64_t>(0, e.ejected_until_ms.load(std::memory_order_relaxed) - now_ms);
  v.ejections = e.ejections.load(std::memory_order_relaxed);
  v.outstanding = e.outstanding.load(std::memory_order_relaxed);
  v.requests = e.requests.load(std::memory_order_relaxed);
  v.consecutive_failures = e.failures.load(std::memory_order_relaxed);
  return v;
}

}  // namespace tollgate::http
