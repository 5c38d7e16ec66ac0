// How a full shard of the memory store makes room (MemoryStoreOptions::max_keys): the ranking
// of entries by how much they still restrict their clients, the sampling of candidates, and the
// sweep of expired keys; and the limit table's slow path.
#include "store/memory_eviction.hpp"

#include <algorithm>
#include <array>
#include <span>
#include <variant>

#include "store/memory_shard.hpp"

namespace tollgate::store {
namespace internal {

uint16_t LimitTable::AcquireNew(const core::Limit& limit, const Params& params) {
  const uint16_t id = Insert(limit, params);
  if (id != kUnknown) {
    ++entries_[id - 1].keys;
    recent_[next_recent_++ % recent_.size()] = id;
  }
  return id;
}

uint16_t LimitTable::Insert(const core::Limit& limit, const Params& params) {
  if (auto it = ids_.find(params); it != ids_.end()) return it->second;
  uint16_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
    entries_[id - 1] = Entry{limit, params, 0};
  } else if (entries_.size() < UINT16_MAX) {
    entries_.push_back(Entry{limit, params, 0});
    id = static_cast<uint16_t>(entries_.size());
  } else {
    return kUnknown;
  }
  ids_.emplace(params, id);
  return id;
}

}  // namespace internal

namespace {

using internal::kMaxChecks;
using internal::kNotStored;
using internal::LimitTable;
using internal::LogEntry;
using internal::Pending;
using internal::ReportUncommitted;
using internal::Slot;

// Between two sweeps triggered by a full shard: a shard full of live keys evicts by sampling
// instead of scanning itself on every insert.
constexpr int64_t kMinSweepIntervalUs = 1'000'000;
// Candidates examined when a live key must be evicted; up to kMaxEvictionScan when every one of
// them still rejects its client.
constexpr size_t kEvictionSample = 16;
constexpr size_t kMaxEvictionScan = 64;
// The Retry-After of a new key refused by a full shard whose sampled entries gave no time.
constexpr core::Duration kFullRetryFallback = core::Duration::Seconds(1);

// How much a key's state restricts its client at some instant: the order of eviction, least
// restrictive first.
struct Hold {
  enum Level : uint8_t {
    kNothing,  // expired: equivalent to a fresh state
    kSome,     // a request of cost 1 would pass; `used` of the limit is taken
    kRejects,  // a request of cost 1 would be rejected, for `retry`
  };
  Level level = kNothing;
  double used = 0;         // kSome: fraction of the limit used, [0, 1]
  core::Duration retry;    // kRejects: until a request of cost 1 passes
  int64_t expires_us = 0;  // between equal holds, the entry nearest to expiry goes first

  bool LessThan(const Hold& o) const {
    if (level != o.level) return level < o.level;
    if (used != o.used) return used < o.used;
    return expires_us < o.expires_us;
  }
};

// A decision on `state` at `now` that changes nothing a store keeps: a State is copied; a log
// is peeked at, which records nothing (it may drop entries that left the window, as any
// evaluation does).
core::Decision Probe(const core::Limit& limit, const core::State& state, int64_t cost,
                     core::Instant now) {
  core::State copy = state;
  return limit.Evaluate(copy, cost, now);
}
core::Decision Probe(const core::Limit& limit, core::LogState& log, int64_t cost,
                     core::Instant now) {
  return limit.Peek(log, cost, now);
}

// `state` holds nothing once its expiry passed. Otherwise its limit decides, from one request of
// cost 1: whether it rejects now (and for how long), else how much of the limit is used before
// it: 1 - remaining / q of the policy, or for a quota its usage / its ceiling (0 without one: a
// quota that only meters or only reports an allowance restricts nothing). With no limit known,
// the state is kept as if it rejected until it expires.
template <class S>
Hold HoldOf(const core::Limit* limit, S& state, int64_t expires_us, core::Instant now) {
  Hold h;
  h.expires_us = expires_us;
  if (expires_us <= now.unix_micros()) return h;
  h.level = Hold::kRejects;
  if (limit == nullptr) {
    h.retry = core::Instant::FromUnixMicros(expires_us) - now;
    return h;
  }
  const core::Decision one = Probe(*limit, state, 1, now);
  if (!one.allowed) {
    h.retry = one.retry_after;
    return h;
  }
  h.level = Hold::kSome;
  if (const auto* quota = std::get_if<core::Quota>(&limit->impl())) {
    if (quota->ceiling()) {
      h.used = static_cast<double>(one.used - 1) / static_cast<double>(*quota->ceiling());
    }
    return h;
  }
  // What is left before the request: a log's Peek reports it as is, the others after the debit.
  const int64_t left = one.remaining + (limit->UsesLog() ? 0 : 1);
  if (one.limit > 0) {
    h.used = 1.0 - static_cast<double>(std::clamp<int64_t>(left, 0, one.limit)) /
                       static_cast<double>(one.limit);
  }
  return h;
}

// The answer to a new key that the shard has no room for without dropping state that still
// rejects: a rejection, with nothing stored.
core::Decision FullRejection(const core::Limit& limit, core::Duration retry) {
  core::Decision d;
  d.allowed = false;
  d.code = core::RejectCode::kRateLimited;
  d.limit = limit.PolicyQuota();
  d.remaining = 0;
  d.reset = retry;
  d.retry_after = retry;
  return d;
}

bool Kept(uint64_t h1, std::span<const uint64_t> keep) {
  return std::find(keep.begin(), keep.end(), h1) != keep.end();
}

}  // namespace

bool MemoryStore::Shard::MakeRoomFor(std::span<const Check> checks,
                                     std::span<core::Decision> decisions,
                                     std::span<Pending> pending, core::Instant now,
                                     MemoryStoreStats& stats) {
  core::Duration retry;
  if (Reserve(checks, decisions, pending, now, stats, retry)) return true;
  if (retry.IsInfinite() || retry <= core::Duration()) retry = kFullRetryFallback;
  for (size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    const bool exists =
        c.limit->UsesLog() ? FindLog(pending[i].digest) != nullptr : pending[i].slot != nullptr;
    if (!exists && c.enforced && c.cost > 0 && decisions[i].allowed) {
      decisions[i] = FullRejection(*c.limit, retry);
    }
  }
  ReportUncommitted(checks, decisions, pending, now);
  stats.full_rejections.fetch_add(1, std::memory_order_relaxed);
  return false;
}

inline bool MemoryStore::Shard::Reserve(std::span<const Check> checks,
                                        std::span<const core::Decision> decisions,
                                        std::span<Pending> pending, core::Instant now,
                                        MemoryStoreStats& stats, core::Duration& retry) {
  // A sweep may drop the batch's own expired keys (as good as fresh): it goes first, so that
  // they count as new keys. It moves slots.
  SweepIfDue(now, stats);
  for (size_t i = 0; i < checks.size(); ++i) {
    if (!checks[i].limit->UsesLog()) pending[i].slot = Find(pending[i].digest);
  }
  size_t slots[2] = {0, 0};  // new keys of shadow [0] and enforced [1] checks
  size_t logs[2] = {0, 0};
  std::array<uint64_t, kMaxChecks> keep;
  size_t kept = 0;
  for (size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    const bool log = c.limit->UsesLog();
    if (log ? FindLog(pending[i].digest) != nullptr : pending[i].slot != nullptr) {
      keep[kept++] = pending[i].digest.h1;
    } else if (decisions[i].allowed && c.cost > 0) {
      ++(log ? logs : slots)[c.enforced ? 1 : 0];
    }
  }
  const std::span<const uint64_t> keeping(keep.data(), kept);
  retry = core::Duration::Infinite();
  const size_t slot_room = MakeRoomForSlots(slots[0] + slots[1], keeping, now, stats, retry);
  for (size_t i = 0; i < checks.size(); ++i) {
    if (!checks[i].limit->UsesLog()) pending[i].slot = Find(pending[i].digest);
  }
  if (slot_room < slots[1]) return false;
  const size_t log_room = MakeRoomForLogs(logs[0] + logs[1], keeping, now, stats, retry);
  if (log_room < logs[1]) return false;
  // The shadow checks' new keys beyond the room left are not stored.
  size_t shadow_slots = slot_room - slots[1];
  size_t shadow_logs = log_room - logs[1];
  for (size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    const bool log = c.limit->UsesLog();
    if (c.enforced || !decisions[i].allowed || c.cost == 0) continue;
    if (log ? FindLog(pending[i].digest) != nullptr : pending[i].slot != nullptr) continue;
    size_t& left = log ? shadow_logs : shadow_slots;
    if (left > 0) {
      --left;
    } else {
      pending[i].digest.h1 = kNotStored;
    }
  }
  return true;
}

inline size_t MemoryStore::Shard::MakeRoomForSlots(size_t keys, std::span<const uint64_t> keep,
                                                   core::Instant now, MemoryStoreStats& stats,
                                                   core::Duration& retry) {
  while (count_ + keys > max_keys_) {
    bool expired = false;
    const size_t victim = PickSlot(keep, now, retry, expired);
    if (victim == SIZE_MAX) return max_keys_ - count_;
    (expired ? stats.expired : stats.evicted_live).fetch_add(1, std::memory_order_relaxed);
    Erase(victim);
  }
  return keys;
}

inline size_t MemoryStore::Shard::PickSlot(std::span<const uint64_t> keep, core::Instant now,
                                           core::Duration& retry, bool& expired) {
  size_t best = SIZE_MAX;
  Hold best_hold;
  size_t i = eviction_cursor_;
  for (size_t seen = 0, steps = 0; steps < capacity_; ++steps, i = Next(i)) {
    if (seen == kMaxEvictionScan) break;
    if (seen >= kEvictionSample && best_hold.level != Hold::kRejects) break;
    const Slot& s = slots_[i];
    if (s.h1 == 0 || Kept(s.h1, keep)) continue;
    ++seen;
    const Hold h = HoldOf(limits_.Find(s.limit_id), s.state, int64_t{s.expires_s} * 1'000'000, now);
    if (h.level == Hold::kRejects) retry = std::min(retry, h.retry);
    if (best == SIZE_MAX || h.LessThan(best_hold)) {
      best = i;
      best_hold = h;
    }
    if (h.level == Hold::kNothing) break;  // nothing is less restrictive
  }
  eviction_cursor_ = i;
  if (best == SIZE_MAX || best_hold.level == Hold::kRejects) return SIZE_MAX;
  expired = best_hold.level == Hold::kNothing;
  return best;
}

inline size_t MemoryStore::Shard::MakeRoomForLogs(size_t keys, std::span<const uint64_t> keep,
                                                  core::Instant now, MemoryStoreStats& stats,
                                                  core::Duration& retry) {
  while (logs_.size() + keys > max_keys_) {
    bool expired = false;
    const auto victim = PickLog(keep, now, retry, expired);
    if (victim == logs_.end()) return max_keys_ - logs_.size();
    (expired ? stats.expired : stats.evicted_live).fetch_add(1, std::memory_order_relaxed);
    limits_.Release(victim->second.limit_id);
    logs_.erase(victim);
  }
  return keys;
}

inline std::unordered_map<uint64_t, LogEntry>::iterator MemoryStore::Shard::PickLog(
    std::span<const uint64_t> keep, core::Instant now, core::Duration& retry, bool& expired) {
  const size_t buckets = logs_.bucket_count();
  uint64_t best = 0;
  bool found = false;
  Hold best_hold;
  size_t b = log_cursor_ % buckets;
  size_t seen = 0;
  for (size_t steps = 0; steps < buckets; ++steps, b = b + 1 == buckets ? 0 : b + 1) {
    if (seen >= kMaxEvictionScan) break;
    if (seen >= kEvictionSample && best_hold.level != Hold::kRejects) break;
    for (auto it = logs_.begin(b); it != logs_.end(b); ++it) {
      if (Kept(it->first, keep)) continue;
      ++seen;
      LogEntry& e = it->second;
      const Hold h =
          HoldOf(limits_.Find(e.limit_id), e.log, e.log.empty() ? INT64_MIN : e.expires_us, now);
      if (h.level == Hold::kRejects) retry = std::min(retry, h.retry);
      if (!found || h.LessThan(best_hold)) {
        best = it->first;
        best_hold = h;
        found = true;
      }
    }
    if (found && best_hold.level == Hold::kNothing) break;
  }
  log_cursor_ = b;
  if (!found || best_hold.level == Hold::kRejects) return logs_.end();
  expired = best_hold.level == Hold::kNothing;
  return logs_.find(best);
}

inline void MemoryStore::Shard::SweepIfDue(core::Instant now, MemoryStoreStats& stats) {
  if (now.unix_micros() - last_sweep_us_ >= kMinSweepIntervalUs) Sweep(now, stats);
}

size_t MemoryStore::Shard::Sweep(core::Instant now, MemoryStoreStats& stats) {
  last_sweep_us_ = now.unix_micros();
  const uint32_t now_s =
      static_cast<uint32_t>(std::clamp<int64_t>(now.unix_micros() / 1'000'000, 0, UINT32_MAX));
  const size_t before = count_;
  // In place, with no second table. Erase() may shift a later entry into slot i, so slot i is
  // looked at again. An entry shifted across the end of the table into a slot before i was
  // itself at a position before i (it wrapped around), so it has already been looked at.
  for (size_t i = 0; i < capacity_; ++i) {
    while (slots_[i].h1 != 0 && slots_[i].expires_s <= now_s) Erase(i);
  }
  const size_t dropped = before - count_ + SweepLogs(now, stats);
  stats.expired.fetch_add(before - count_, std::memory_order_relaxed);
  return dropped;
}

inline size_t MemoryStore::Shard::SweepLogs(core::Instant now, MemoryStoreStats& stats) {
  size_t dropped = 0;
  for (auto it = logs_.begin(); it != logs_.end();) {
    if (it->second.log.empty() || it->second.expires_us <= now.unix_micros()) {
      limits_.Release(it->second.limit_id);
      it = logs_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  stats.expired.fetch_add(dropped, std::memory_order_relaxed);
  return dropped;
}

}  // namespace tollgate::store
