// Sliding-window log: the exact number of accepted units in (now - W, now].
#pragma once

#include <cstdint>
#include <vector>

#include <tollgate/core/decision.hpp>
#include <tollgate/core/result.hpp>
#include <tollgate/core/time.hpp>

namespace tollgate::core {

// The accepted requests of one identity, oldest first. Memory is O(limit): only accepted
// requests are recorded and their costs sum to at most the limit.
// Not thread-safe; owned by the store that keeps it.
class LogState {
 public:
  struct Entry {
    int64_t at_us;
    int64_t cost;
  };
  bool empty() const { return head_ == entries_.size(); }
  // Newest entry's time; REQUIRES !empty().
  int64_t newest_us() const { return entries_.back().at_us; }
  size_t size() const { return entries_.size() - head_; }

 private:
  friend class SlidingLog;
  void DropOlderThan(int64_t cutoff_us);  // drops entries with at_us <= cutoff_us
  std::vector<Entry> entries_;
  size_t head_ = 0;  // entries_[0, head_) are expired, reclaimed lazily
  int64_t total_ = 0;
};

// Thread-safe (immutable parameters; state is passed in).
class SlidingLog {
 public:
  static Result<SlidingLog> Create(int64_t limit, Duration window);

  // Decides a request of `cost` at `now`; records it in `state` only when allowed (a rejected
  // request never counts: clients that retry during a 429 recover). `state` drops what left
  // the window either way.
  Decision Evaluate(LogState& state, int64_t cost, Instant now) const;
  // The same decision without recording anything (cost 0 reads the current state).
  Decision Peek(LogState& state, int64_t cost, Instant now) const;

  // When every recorded request has left the window.
  Instant EmptyAt(const LogState& state) const;

  int64_t limit() const { return limit_; }
  Duration window() const { return window_; }

 private:
  SlidingLog(int64_t limit, Duration window) : limit_(limit), window_(window) {}
  Decision Decide(LogState& state, int64_t cost, Instant now, bool record) const;
  int64_t limit_;
  Duration window_;
};

}  // namespace tollgate::core
