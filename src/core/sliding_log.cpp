#include <tollgate/core/sliding_log.hpp>

#include <algorithm>

namespace tollgate::core {

void LogState::DropOlderThan(int64_t cutoff_us) {
  while (head_ < entries_.size() && entries_[head_].at_us <= cutoff_us) {
    total_ -= entries_[head_].cost;
    ++head_;
  }
  // Reclaim the expired prefix once it is at least half the vector: amortized O(1).
  if (head_ > 0 && head_ * 2 >= entries_.size()) {
    entries_.erase(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
}

Result<SlidingLog> SlidingLog::Create(int64_t limit, Duration window) {
  if (limit <= 0) return Error{"limit: must be > 0"};
  if (window.micros() <= 0) return Error{"window_seconds: must be > 0"};
  return SlidingLog(limit, window);
}

Decision SlidingLog::Evaluate(LogState& state, int64_t cost, Instant now) const {
  return Decide(state, cost, now, true);
}

Decision SlidingLog::Peek(LogState& state, int64_t cost, Instant now) const {
  return Decide(state, cost, now, false);
}

Decision SlidingLog::Decide(LogState& state, int64_t cost, Instant now, bool record) const {
  state.DropOlderThan(now.unix_micros() - window_.micros());
  Decision d;
  d.limit = limit_;
  if (cost > limit_) {
    d.allowed = false;
    d.code = RejectCode::kCostExceedsCapacity;
    d.retry_after = Duration::Infinite();
  } else if (state.total_ + cost <= limit_) {
    if (record && cost > 0) {
      // Entries stay in time order even if the clock steps back.
      const int64_t at =
          state.empty() ? now.unix_micros() : std::max(now.unix_micros(), state.newest_us());
      state.entries_.push_back({at, cost});
      state.total_ += cost;
    }
  } else {
    d.allowed = false;
    d.code = RejectCode::kRateLimited;
    // Wait until enough of the oldest entries have left the window.
    int64_t total = state.total_;
    int64_t leaves_at = now.unix_micros();
    for (size_t i = state.head_; i < state.entries_.size() && total + cost > limit_; ++i) {
      total -= state.entries_[i].cost;
      leaves_at = state.entries_[i].at_us + window_.micros();
    }
    d.retry_after = Duration::Micros(leaves_at - now.unix_micros());
  }
  d.remaining = std::max<int64_t>(0, limit_ - state.total_);
  d.reset = state.empty() ? Duration() : EmptyAt(state) - now;
  return d;
}

Instant SlidingLog::EmptyAt(const LogState& state) const {
  return Instant::FromUnixMicros(state.empty() ? 0 : state.newest_us() + window_.micros());
}

}  // namespace tollgate::core
