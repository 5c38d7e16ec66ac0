// One shard of the memory store: its slot table and sliding-window logs, and the path of a batch
// through them (inline: it runs per decision). Making room when it is full, and the sweep, are
// in memory_eviction.cpp. Private to src/store.
#pragma once

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>

#include <tollgate/core/limit.hpp>
#include <tollgate/store/memory_store.hpp>

#include "store/memory_eviction.hpp"

namespace tollgate::store {
namespace internal {

inline constexpr size_t kMaxChecks = 16;
inline constexpr double kMaxLoad = 0.8;
// Pending::digest.h1 of a check whose new key is not stored (real digests have their low bit set).
inline constexpr uint64_t kNotStored = 0;

// One key: 32 bytes. h1 == 0 marks an empty slot (real digests have their low bit set).
struct Slot {
  uint64_t h1;
  uint16_t h2;
  uint16_t limit_id;   // the key's limit in its shard's LimitTable
  uint32_t expires_s;  // seconds since the epoch, rounded up; valid until 2106
  core::State state;
};
static_assert(sizeof(Slot) == 32);

inline uint32_t ToExpirySeconds(core::Instant t) {
  const int64_t s = (t.unix_micros() + 999'999) / 1'000'000;
  return static_cast<uint32_t>(std::clamp<int64_t>(s, 0, UINT32_MAX));
}

struct Digest {
  uint64_t h1;
  uint16_t h2;
};

// The slot tables of all shards (memory_store.cpp).
class SlotArena;

inline size_t SlotsPerShard(size_t max_keys) {
  return std::max<size_t>(16, static_cast<size_t>(static_cast<double>(max_keys) / kMaxLoad) + 1);
}

// A sliding-window log and what the shard records beside it.
struct LogEntry {
  core::LogState log;
  int64_t expires_us = 0;  // when every recorded request has left the window
  uint16_t limit_id = LimitTable::kUnknown;
};

// One check of a batch between its evaluation and its commit. Left uninitialised: zeroing
// kMaxChecks of them on every batch showed in profiles.
struct Pending {
  Digest digest;   // h1 == kNotStored: a shadow check whose new key a full shard has no room for
  Slot* slot;      // the key's slot when it exists
  int64_t next_a;  // the state after this check, applied on commit
  int64_t next_b;
};

// Allowed checks of a batch that commits nothing report their state as it is, not after a debit
// that did not happen (the headers of a 429 stay honest). Logs were only peeked at.
inline void ReportUncommitted(std::span<const Check> checks, std::span<core::Decision> decisions,
                              std::span<const Pending> pending, core::Instant now) {
  for (size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    if (!decisions[i].allowed || c.cost == 0 || c.limit->UsesLog()) continue;
    core::State now_state = pending[i].slot ? pending[i].slot->state : core::State{};
    decisions[i] = c.limit->Evaluate(now_state, 0, now);
  }
}

}  // namespace internal

// Aligned to a cache line so that the locks of two shards never share one.
class alignas(64) MemoryStore::Shard {
  using Digest = internal::Digest;
  using LimitTable = internal::LimitTable;
  using LogEntry = internal::LogEntry;
  using Pending = internal::Pending;
  using Slot = internal::Slot;
  using SlotArena = internal::SlotArena;

 public:
  // `slots` is this shard's part of `arena`: SlotsPerShard(max_keys) slots.
  Shard(size_t max_keys, std::shared_ptr<SlotArena> arena, Slot* slots)
      : max_keys_(max_keys),
        capacity_(internal::SlotsPerShard(max_keys)),
        slots_(slots),
        arena_(std::move(arena)) {}

  std::mutex mu;

  // Starts loading the cache line where `d` would be, and the next slot's: a probe often goes
  // on to it, and it is on the next line for every other home slot (measured: +31 % batched,
  // +11 % single over the home line alone; docs/benchmarks/history.md). Needs no lock: the table
  // never moves; one past the last slot is still a pointer into (or just past) the arena.
  void Prefetch(Digest d) const {
    const auto* home = reinterpret_cast<const char*>(&slots_[Home(d.h1)]);
    __builtin_prefetch(home);
    __builtin_prefetch(home + sizeof(Slot));
  }

  // REQUIRES: mu held. The pointer stays valid until the next Put() of a new key, Sweep() or
  // MakeRoomFor().
  Slot* Find(Digest d) {
    for (size_t i = Home(d.h1);; i = Next(i)) {
      Slot& s = slots_[i];
      if (s.h1 == 0) return nullptr;
      if (s.h1 == d.h1 && s.h2 == d.h2) return &s;
    }
  }

  // Stores `state` in a slot found by Find(). REQUIRES: mu held.
  static void Update(Slot& slot, const core::State& state, core::Instant expires) {
    slot.state = state;
    slot.expires_s = internal::ToExpirySeconds(expires);
  }

  // The steps of MemoryStore::ApplyNow() under the lock, inline as the one function they were.
  // REQUIRES: mu held.
  //
  // Decides every check on the state as it is, changing nothing: a slot's next state is kept in
  // `pending` for the commit, a log is only peeked at (the recording Evaluate follows on
  // commit). Returns whether the batch commits: it consumes and no enforced check rejects.
  // `creates` counts the checks that may create a key (a missing slot; any log): an upper bound.
  [[gnu::always_inline]] bool Evaluate(const Batch& batch, std::span<core::Decision> decisions,
                                       std::span<Pending> pending, core::Instant now,
                                       size_t& creates) {
    bool commit = batch.mode == Mode::kConsume;
    for (size_t i = 0; i < batch.checks.size(); ++i) {
      const Check& c = batch.checks[i];
      Pending& p = pending[i];
      if (c.limit->UsesLog()) {
        core::LogState empty;
        LogEntry* entry = FindLog(p.digest);
        decisions[i] = c.limit->Peek(entry ? entry->log : empty, c.cost, now);
        ++creates;
      } else {
        p.slot = Find(p.digest);
        core::State next = p.slot ? p.slot->state : core::State{};
        decisions[i] = c.limit->Evaluate(next, c.cost, now, c.may_delay);
        p.next_a = next.a;
        p.next_b = next.b;
        creates += p.slot == nullptr;
      }
      if (!decisions[i].allowed && c.enforced) commit = false;
    }
    return commit;
  }

  // Keys that exist are updated in place: that moves no slot, so the pointers from Find() stay
  // valid. It is all a batch of known keys does.
  [[gnu::always_inline]] static void UpdateExisting(std::span<const Check> checks,
                                                    std::span<const core::Decision> decisions,
                                                    std::span<const Pending> pending) {
    for (size_t i = 0; i < checks.size(); ++i) {
      const Check& c = checks[i];
      const Pending& p = pending[i];
      if (!decisions[i].allowed || c.cost == 0 || c.limit->UsesLog() || p.slot == nullptr) continue;
      const core::State next{p.next_a, p.next_b};
      Update(*p.slot, next, c.limit->ExpiresAt(next));
    }
  }

  // Stores the new keys and records the logs of a committing batch, once there is room for
  // them (Fits() or MakeRoomFor()). Inserting moves slots: after UpdateExisting().
  [[gnu::always_inline]] void StoreNew(std::span<const Check> checks,
                                       std::span<core::Decision> decisions,
                                       std::span<const Pending> pending, core::Instant now) {
    for (size_t i = 0; i < checks.size(); ++i) {
      const Check& c = checks[i];
      const Pending& p = pending[i];
      if (!decisions[i].allowed || c.cost == 0 || p.digest.h1 == internal::kNotStored) continue;
      if (c.limit->UsesLog()) {
        LogEntry& entry = LogFor(p.digest, *c.limit);
        decisions[i] = c.limit->Evaluate(entry.log, c.cost, now);
        entry.expires_us = c.limit->ExpiresAt(entry.log).unix_micros();
      } else if (p.slot == nullptr) {
        const core::State next{p.next_a, p.next_b};
        Put(p.digest, *c.limit, next, c.limit->ExpiresAt(next));
      }
    }
  }

  // Whether `keys` new keys fit as things are, be they slots or logs (or some of each).
  // REQUIRES: mu held.
  bool Fits(size_t keys) const {
    return count_ + keys <= max_keys_ && logs_.size() + keys <= max_keys_;
  }

  // Makes room for the keys that the committing batch `checks` creates, by the eviction rule of
  // MemoryStoreOptions::max_keys; the batch's own keys are never evicted. Shadow checks' new
  // keys are stored while room is left; the others are marked kNotStored in `pending`. When the
  // new keys of enforced checks do not all fit, the batch is refused instead: returns false with
  // its decisions rewritten (FullRejection for those keys, the others as in a batch that commits
  // nothing), counted in full_rejections; the batch must then store nothing. Sweeping and
  // evicting move slots: the slots in `pending` are found again. Out of line: the path of a
  // shard that is not full stays small. REQUIRES: mu held.
  [[gnu::noinline]] bool MakeRoomFor(std::span<const Check> checks,
                                     std::span<core::Decision> decisions,
                                     std::span<Pending> pending, core::Instant now,
                                     MemoryStoreStats& stats);

  // Stores `state` for `d` under `limit`. REQUIRES: mu held; room for a new key (Fits() or
  // MakeRoomFor()).
  void Put(Digest d, const core::Limit& limit, const core::State& state, core::Instant expires) {
    if (Slot* s = Find(d)) {
      Update(*s, state, expires);
      return;
    }
    assert(count_ < max_keys_);
    size_t i = Home(d.h1);
    while (slots_[i].h1 != 0) i = Next(i);
    slots_[i] = Slot{d.h1, d.h2, limits_.Acquire(limit), internal::ToExpirySeconds(expires), state};
    ++count_;
  }

  // Forgets the state of `d`, a slot's or a log's. Returns whether there was one. REQUIRES: mu
  // held.
  bool Forget(Digest d, bool log) {
    if (log) {
      auto it = logs_.find(d.h1);
      if (it == logs_.end()) return false;
      limits_.Release(it->second.limit_id);
      logs_.erase(it);
      return true;
    }
    Slot* s = Find(d);
    if (!s) return false;
    Erase(static_cast<size_t>(s - slots_));
    return true;
  }

  LogEntry* FindLog(Digest d) {
    auto it = logs_.find(d.h1);
    return it == logs_.end() ? nullptr : &it->second;
  }

  // The log of `d`, created under `limit` if missing. REQUIRES: mu held; room for a new log
  // unless it exists.
  [[gnu::always_inline]] LogEntry& LogFor(Digest d, const core::Limit& limit) {
    auto [it, created] = logs_.try_emplace(d.h1);
    if (created) {
      assert(logs_.size() <= max_keys_);
      it->second.limit_id = limits_.Acquire(limit);
    }
    return it->second;
  }

  // REQUIRES: mu held.
  size_t Sweep(core::Instant now, MemoryStoreStats& stats);

  size_t size() const { return count_ + logs_.size(); }

  size_t MemoryBytes() const {
    size_t bytes = capacity_ * sizeof(Slot) + limits_.MemoryBytes();
    for (const auto& [h, entry] : logs_) {
      bytes += sizeof(entry) + 32 + entry.log.size() * sizeof(core::LogState::Entry);
    }
    return bytes;
  }

 private:
  size_t Home(uint64_t h) const {
    return static_cast<size_t>((static_cast<unsigned __int128>(h) * capacity_) >> 64);
  }
  size_t Next(size_t i) const { return i + 1 == capacity_ ? 0 : i + 1; }

  // The steps of MakeRoomFor() and Sweep(), defined in memory_eviction.cpp and used there only;
  // `inline` as they were when defined in this class, so that they inline into MakeRoomFor().

  // MakeRoomFor() short of refusing: false, with `retry`, when the enforced checks' new keys
  // do not all fit.
  inline bool Reserve(std::span<const Check> checks, std::span<const core::Decision> decisions,
                      std::span<Pending> pending, core::Instant now, MemoryStoreStats& stats,
                      core::Duration& retry);

  // A shard that fills up sweeps, at most once per kMinSweepIntervalUs.
  inline void SweepIfDue(core::Instant now, MemoryStoreStats& stats);

  // Evicts slots until `keys` new keys fit or no slot may go. Returns how many fit, <= keys.
  inline size_t MakeRoomForSlots(size_t keys, std::span<const uint64_t> keep, core::Instant now,
                                 MemoryStoreStats& stats, core::Duration& retry);

  // The slot to evict: the least restrictive (Hold) of a sample of kEvictionSample entries not in
  // `keep`, taken from a position that moves on with every call so that samples cover the table
  // over time. While every entry seen rejects now, up to kMaxEvictionScan are looked at.
  // SIZE_MAX when all of them reject: `retry` is then the soonest that one stops.
  inline size_t PickSlot(std::span<const uint64_t> keep, core::Instant now, core::Duration& retry,
                         bool& expired);

  // Evicts logs until `keys` new logs fit or no log may go, as MakeRoomForSlots() does.
  inline size_t MakeRoomForLogs(size_t keys, std::span<const uint64_t> keep, core::Instant now,
                                MemoryStoreStats& stats, core::Duration& retry);

  // The log to evict, chosen as PickSlot() chooses a slot; the sample walks the map's buckets.
  inline std::unordered_map<uint64_t, LogEntry>::iterator PickLog(std::span<const uint64_t> keep,
                                                                  core::Instant now,
                                                                  core::Duration& retry,
                                                                  bool& expired);

  // Backward-shift deletion keeps linear probing free of tombstones.
  void Erase(size_t hole) {
    limits_.Release(slots_[hole].limit_id);
    for (size_t j = Next(hole);; j = Next(j)) {
      if (slots_[j].h1 == 0) break;
      const size_t k = Home(slots_[j].h1);
      const bool stays = hole <= j ? (hole < k && k <= j) : (hole < k || k <= j);
      if (stays) continue;
      slots_[hole] = slots_[j];
      hole = j;
    }
    slots_[hole] = Slot{};
    --count_;
  }

  inline size_t SweepLogs(core::Instant now, MemoryStoreStats& stats);

  const size_t max_keys_;
  const size_t capacity_;
  Slot* const slots_;                 // capacity_ slots in arena_
  std::shared_ptr<SlotArena> arena_;  // shared by all shards of the store
  size_t count_ = 0;
  int64_t last_sweep_us_ = INT64_MIN / 2;
  size_t eviction_cursor_ = 0;
  size_t log_cursor_ = 0;
  LimitTable limits_;
  std::unordered_map<uint64_t, LogEntry> logs_;
};

}  // namespace tollgate::store
