#include <tollgate/store/memory_store.hpp>

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <type_traits>
#include <unordered_map>
#include <variant>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <tollgate/util/hash.hpp>

namespace tollgate::store {
namespace {

constexpr size_t kMaxChecks = 16;
constexpr double kMaxLoad = 0.8;
constexpr uint64_t kScopeSeed = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kNameSeed = 0x165667b19e3779f9ull;
constexpr uint64_t kDigestSalt = 0x27d4eb2f165667c5ull;
constexpr uint64_t kDigestSalt2 = 0x94d049bb133111ebull;
constexpr uint64_t kParamsSeed = 0xd6e8feb86659fd93ull;
// Slot tables at least this large are placed on transparent huge pages (see SlotArena).
constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kHugePageMinTable = 4 * kHugePageBytes;
// Between two sweeps triggered by a full shard: a shard full of live keys evicts by sampling
// instead of scanning itself on every insert.
constexpr int64_t kMinSweepIntervalUs = 1'000'000;
// Candidates examined when a live key must be evicted; up to kMaxEvictionScan when every one of
// them still rejects its client.
constexpr size_t kEvictionSample = 16;
constexpr size_t kMaxEvictionScan = 64;
// Pending::digest.h1 of a check whose new key is not stored (real digests have their low bit set).
constexpr uint64_t kNotStored = 0;
// The Retry-After of a new key refused by a full shard whose sampled entries gave no time.
constexpr core::Duration kFullRetryFallback = core::Duration::Seconds(1);

// One key: 32 bytes. h1 == 0 marks an empty slot (real digests have their low bit set).
struct Slot {
  uint64_t h1;
  uint16_t h2;
  uint16_t limit_id;   // the key's limit in its shard's LimitTable
  uint32_t expires_s;  // seconds since the epoch, rounded up; valid until 2106
  core::State state;
};
static_assert(sizeof(Slot) == 32);

uint32_t ToExpirySeconds(core::Instant t) {
  const int64_t s = (t.unix_micros() + 999'999) / 1'000'000;
  return static_cast<uint32_t>(std::clamp<int64_t>(s, 0, UINT32_MAX));
}

struct Digest {
  uint64_t h1;
  uint16_t h2;
};

// Two hashes of a batch's scope (the halves of one XXH3-128). With the check's name and algorithm they give each
// key a 79-bit digest (h1 with its low bit set, h2), by which alone the table identifies it:
// with a million keys in a shard, two keys share one with odds of about 2^-40. The other 16 bits
// of the 96 a slot has for it name the key's limit (Slot::limit_id).
struct ScopeHash {
  uint64_t a;
  uint64_t b;
};

uint64_t Read32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The name as 64 bits: its bytes when it has at most 8 (exact, given its length), else its hash.
// Check names are short ("burst", "daily"): two hashes of the name per check were about a
// quarter of a hot-key batch (perf; docs/benchmarks.md), where two overlapping 4-byte loads
// read its bytes. The digest mixes them with the scope's hashes, which are seeded per process.
uint64_t NameBits(std::string_view name) {
  const char* p = name.data();
  const size_t n = name.size();
  if (n > 8) return util::Hash64(name, kNameSeed);
  if (n >= 4) return Read32(p) | (Read32(p + n - 4) << 32);
  if (n == 0) return 0;
  const auto byte = [&](size_t i) { return uint64_t{static_cast<unsigned char>(p[i])}; };
  return (byte(0) << 16) | (byte(n / 2) << 8) | byte(n - 1);
}

// The key of one check: the scope is hashed once per batch, the name once per check.
Digest DigestOf(const ScopeHash& scope, std::string_view name, core::Algorithm algorithm) {
  const uint64_t bits = NameBits(name);
  const uint64_t salt = (static_cast<uint64_t>(algorithm) << 32) ^ name.size();
  return Digest{util::internal::Mix(scope.a ^ bits, kDigestSalt ^ salt) | 1,
                static_cast<uint16_t>(util::internal::Mix(scope.b ^ bits, kDigestSalt2 ^ salt))};
}

// The slot tables of all shards: one zeroed allocation made at construction, never resized.
//
// With a million keys every lookup is a cache miss, and with 4 KiB pages a TLB miss as well; the
// page walk adds to the miss. A large table is therefore 2 MiB aligned and advised onto
// transparent huge pages (used when the system's THP mode is "madvise" or "always"). It is
// zeroed here, not on first use, so that page faults (2 MiB of zeroing each) happen at start-up
// rather than under a shard lock on the request path.
class SlotArena {
 public:
  explicit SlotArena(size_t count) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const size_t bytes = count * sizeof(Slot);
    if (bytes >= kHugePageMinTable) {
      const size_t length = bytes + kHugePageBytes;
      void* map = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (map != MAP_FAILED) {
        map_ = map;
        map_length_ = length;
        const uintptr_t aligned =
            (reinterpret_cast<uintptr_t>(map) + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
        slots_ = reinterpret_cast<Slot*>(aligned);
        (void)madvise(slots_, bytes, MADV_HUGEPAGE);  // a hint: failure leaves 4 KiB pages
      }
    }
#endif
    if (slots_ == nullptr) {
      heap_ = std::make_unique<Slot[]>(count);
      slots_ = heap_.get();
    } else {
      std::uninitialized_value_construct_n(slots_, count);
    }
  }
  ~SlotArena() {
#if defined(__linux__)
    if (map_ != nullptr) munmap(map_, map_length_);
#endif
  }
  SlotArena(const SlotArena&) = delete;
  SlotArena& operator=(const SlotArena&) = delete;

  Slot* slots() const { return slots_; }

 private:
  Slot* slots_ = nullptr;
  std::unique_ptr<Slot[]> heap_;
  void* map_ = nullptr;
  size_t map_length_ = 0;
};

size_t SlotsPerShard(size_t max_keys) {
  return std::max<size_t>(16, static_cast<size_t>(static_cast<double>(max_keys) / kMaxLoad) + 1);
}

// The limits of one shard's keys, each kept once by value under a 16-bit id.
//
// Eviction must know how much a key's state still restricts its client, and a State alone
// cannot say: 5 units used is an exhausted window under a limit of 5 and nothing under 5,000.
// A key therefore records the id of its limit when it is created (an update leaves it alone, so
// the path of a known key does no more work than before). A key whose limit a reload changed is
// ranked by the limit it was created under until it expires. Ids are counted and reused once
// their last key is gone, so the table holds only the distinct limits of keys present.
// Not thread-safe: guarded by its shard's mutex.
class LimitTable {
 public:
  // Given when 65,535 distinct limits are in use in the shard: the key is kept as if it
  // rejected until it expires (see HoldOf).
  static constexpr uint16_t kUnknown = 0;

  // The id of `limit`'s parameters, counting one more key that uses it.
  uint16_t Acquire(const core::Limit& limit) {
    const Params params = ParamsOf(limit);
    // A batch's few limits recur from key to key: the last ones are looked at first.
    for (const uint16_t id : recent_) {
      if (id != kUnknown && entries_[id - 1].params == params) {
        ++entries_[id - 1].keys;
        return id;
      }
    }
    return AcquireNew(limit, params);
  }

  // One key fewer uses `id`.
  void Release(uint16_t id) {
    if (id == kUnknown) return;
    Entry& e = entries_[id - 1];
    assert(e.keys > 0);
    if (--e.keys == 0) {
      ids_.erase(e.params);
      free_.push_back(id);
      for (uint16_t& r : recent_) r = r == id ? kUnknown : r;
    }
  }

  // nullptr for kUnknown.
  const core::Limit* Find(uint16_t id) const {
    return id == kUnknown ? nullptr : &*entries_[id - 1].limit;
  }

  size_t MemoryBytes() const {
    return entries_.capacity() * sizeof(Entry) + free_.capacity() * sizeof(uint16_t) +
           ids_.size() * (sizeof(Params) + 32) + ids_.bucket_count() * sizeof(void*);
  }

 private:
  // A limit's algorithm and parameters: equal for limits that decide alike.
  struct Params {
    int64_t algorithm, p1, p2, p3;
    bool operator==(const Params&) const = default;
  };
  struct ParamsHash {
    size_t operator()(const Params& p) const {
      return util::internal::Mix(p.algorithm ^ p.p1, util::internal::Mix(p.p2, p.p3 ^ kParamsSeed));
    }
  };
  struct Entry {
    std::optional<core::Limit> limit;  // empty never; optional only because Limit has no default
    Params params;
    size_t keys;
  };

  // Acquire() of limits not among the recent ones.
  [[gnu::noinline]] uint16_t AcquireNew(const core::Limit& limit, const Params& params) {
    const uint16_t id = Insert(limit, params);
    if (id != kUnknown) {
      ++entries_[id - 1].keys;
      recent_[next_recent_++ % recent_.size()] = id;
    }
    return id;
  }

  // The id of `params`, made if new (with no key counted yet); kUnknown when none is left.
  uint16_t Insert(const core::Limit& limit, const Params& params) {
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

  static Params ParamsOf(const core::Limit& limit) {
    const auto a = static_cast<int64_t>(limit.algorithm());
    return std::visit(
        [a](const auto& impl) -> Params {
          using T = std::decay_t<decltype(impl)>;
          if constexpr (std::is_same_v<T, core::TokenBucket>) {
            return {a, impl.capacity(), impl.rate().tokens, impl.rate().per_micros};
          } else if constexpr (std::is_same_v<T, core::Quota>) {
            return {a, static_cast<int64_t>(impl.period()), impl.allowance().value_or(-1),
                    impl.ceiling().value_or(-1)};
          } else {
            return {a, impl.limit(), impl.window().micros(), 0};
          }
        },
        limit.impl());
  }

  std::vector<Entry> entries_;  // entries_[id - 1]
  std::vector<uint16_t> free_;  // ids of entries no key uses
  std::unordered_map<Params, uint16_t, ParamsHash> ids_;
  std::array<uint16_t, 4> recent_{};  // ids lately looked up in ids_; kUnknown: none
  size_t next_recent_ = 0;
};

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
void ReportUncommitted(std::span<const Check> checks, std::span<core::Decision> decisions,
                       std::span<const Pending> pending, core::Instant now) {
  for (size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    if (!decisions[i].allowed || c.cost == 0 || c.limit->UsesLog()) continue;
    core::State now_state = pending[i].slot ? pending[i].slot->state : core::State{};
    decisions[i] = c.limit->Evaluate(now_state, 0, now);
  }
}

bool Kept(uint64_t h1, std::span<const uint64_t> keep) {
  return std::find(keep.begin(), keep.end(), h1) != keep.end();
}

}  // namespace

// Aligned to a cache line so that the locks of two shards never share one.
class alignas(64) MemoryStore::Shard {
 public:
  // `slots` is this shard's part of `arena`: SlotsPerShard(max_keys) slots.
  Shard(size_t max_keys, std::shared_ptr<SlotArena> arena, Slot* slots)
      : max_keys_(max_keys),
        capacity_(SlotsPerShard(max_keys)),
        slots_(slots),
        arena_(std::move(arena)) {}

  std::mutex mu;

  // Starts loading the cache line where `d` would be. Needs no lock: the table never moves.
  void Prefetch(Digest d) const { __builtin_prefetch(&slots_[Home(d.h1)]); }

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
    slot.expires_s = ToExpirySeconds(expires);
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
    slots_[i] = Slot{d.h1, d.h2, limits_.Acquire(limit), ToExpirySeconds(expires), state};
    ++count_;
  }

  LogEntry* FindLog(Digest d) {
    auto it = logs_.find(d.h1);
    return it == logs_.end() ? nullptr : &it->second;
  }

  // The log of `d`, created under `limit` if missing. REQUIRES: mu held; room for a new log
  // unless it exists.
  LogEntry& LogFor(Digest d, const core::Limit& limit) {
    auto [it, created] = logs_.try_emplace(d.h1);
    if (created) {
      assert(logs_.size() <= max_keys_);
      it->second.limit_id = limits_.Acquire(limit);
    }
    return it->second;
  }

  // REQUIRES: mu held.
  size_t Sweep(core::Instant now, MemoryStoreStats& stats) {
    last_sweep_us_ = now.unix_micros();
    const uint32_t now_s = static_cast<uint32_t>(std::clamp<int64_t>(now.unix_micros() / 1'000'000, 0, UINT32_MAX));
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

  // MakeRoomFor() short of refusing: false, with `retry`, when the enforced checks' new keys
  // do not all fit.
  bool Reserve(std::span<const Check> checks, std::span<const core::Decision> decisions,
               std::span<Pending> pending, core::Instant now, MemoryStoreStats& stats,
               core::Duration& retry) {
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

  // A shard that fills up sweeps, at most once per kMinSweepIntervalUs.
  void SweepIfDue(core::Instant now, MemoryStoreStats& stats) {
    if (now.unix_micros() - last_sweep_us_ >= kMinSweepIntervalUs) Sweep(now, stats);
  }

  // Evicts slots until `keys` new keys fit or no slot may go. Returns how many fit, <= keys.
  size_t MakeRoomForSlots(size_t keys, std::span<const uint64_t> keep, core::Instant now,
                          MemoryStoreStats& stats, core::Duration& retry) {
    while (count_ + keys > max_keys_) {
      bool expired = false;
      const size_t victim = PickSlot(keep, now, retry, expired);
      if (victim == SIZE_MAX) return max_keys_ - count_;
      (expired ? stats.expired : stats.evicted_live).fetch_add(1, std::memory_order_relaxed);
      Erase(victim);
    }
    return keys;
  }

  // The slot to evict: the least restrictive (Hold) of a sample of kEvictionSample entries not in
  // `keep`, taken from a position that moves on with every call so that samples cover the table
  // over time. While every entry seen rejects now, up to kMaxEvictionScan are looked at.
  // SIZE_MAX when all of them reject: `retry` is then the soonest that one stops.
  size_t PickSlot(std::span<const uint64_t> keep, core::Instant now, core::Duration& retry,
                  bool& expired) {
    size_t best = SIZE_MAX;
    Hold best_hold;
    size_t i = eviction_cursor_;
    for (size_t seen = 0, steps = 0; steps < capacity_; ++steps, i = Next(i)) {
      if (seen == kMaxEvictionScan) break;
      if (seen >= kEvictionSample && best_hold.level != Hold::kRejects) break;
      const Slot& s = slots_[i];
      if (s.h1 == 0 || Kept(s.h1, keep)) continue;
      ++seen;
      const Hold h =
          HoldOf(limits_.Find(s.limit_id), s.state, int64_t{s.expires_s} * 1'000'000, now);
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

  // Evicts logs until `keys` new logs fit or no log may go, as MakeRoomForSlots() does.
  size_t MakeRoomForLogs(size_t keys, std::span<const uint64_t> keep, core::Instant now,
                         MemoryStoreStats& stats, core::Duration& retry) {
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

  // The log to evict, chosen as PickSlot() chooses a slot; the sample walks the map's buckets.
  std::unordered_map<uint64_t, LogEntry>::iterator PickLog(std::span<const uint64_t> keep,
                                                           core::Instant now, core::Duration& retry,
                                                           bool& expired) {
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

  size_t SweepLogs(core::Instant now, MemoryStoreStats& stats) {
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

MemoryStore::MemoryStore(MemoryStoreOptions options, const util::Clock& clock) : clock_(clock) {
  assert(options.max_keys > 0 && options.shards > 0);
  // A shard holds at least one batch's keys, so that a batch's new keys fit once room is made.
  const size_t shards = std::clamp<size_t>(options.max_keys / kMaxChecks, 1, options.shards);
  const size_t per_shard = std::max(kMaxChecks, (options.max_keys + shards - 1) / shards);
  const size_t slots_per_shard = SlotsPerShard(per_shard);
  auto arena = std::make_shared<SlotArena>(slots_per_shard * shards);
  shards_.reserve(shards);
  for (size_t i = 0; i < shards; ++i) {
    shards_.push_back(
        std::make_unique<Shard>(per_shard, arena, arena->slots() + i * slots_per_shard));
  }
}

MemoryStore::~MemoryStore() = default;

void MemoryStore::Apply(const Batch& batch, std::span<core::Decision> decisions,
                        Completion done) {
  done(ApplyNow(batch, decisions));
}

ApplyResult MemoryStore::ApplyNow(const Batch& batch, std::span<core::Decision> decisions) {
  ApplyResult result;
  const size_t n = batch.checks.size();
  if (n > kMaxChecks || decisions.size() < n) {
    result.error = StoreErrc::kProtocol;
    result.message = "too many checks in one batch";
    return result;
  }
  // Not value_or(): it would read the clock even when the batch carries its time.
  const core::Instant now = batch.now ? *batch.now : clock_.Now();
  result.now = now;

  const util::Hash128Value scope_hash = util::Hash128(batch.scope, kScopeSeed);
  const ScopeHash scope{scope_hash.low, scope_hash.high};
  Shard& shard = *shards_[static_cast<size_t>(
      (static_cast<unsigned __int128>(scope.a) * shards_.size()) >> 64)];

  std::array<Pending, kMaxChecks> pending;
  // Hashing and prefetching before taking the lock: with many keys each check's slot is a cache
  // miss, and the misses of a batch's checks then overlap instead of following one another.
  for (size_t i = 0; i < n; ++i) {
    const Check& c = batch.checks[i];
    pending[i].digest = DigestOf(scope, c.name, c.limit->algorithm());
    if (!c.limit->UsesLog()) shard.Prefetch(pending[i].digest);
  }

  std::lock_guard lock(shard.mu);
  bool commit = batch.mode == Mode::kConsume;
  size_t creates = 0;  // checks that may create a key (a missing slot; any log): an upper bound
  for (size_t i = 0; i < n; ++i) {
    const Check& c = batch.checks[i];
    Pending& p = pending[i];
    if (c.limit->UsesLog()) {
      // Never records here; the recording Evaluate follows on commit.
      core::LogState empty;
      LogEntry* entry = shard.FindLog(p.digest);
      decisions[i] = c.limit->Peek(entry ? entry->log : empty, c.cost, now);
      ++creates;
    } else {
      p.slot = shard.Find(p.digest);
      core::State next = p.slot ? p.slot->state : core::State{};
      decisions[i] = c.limit->Evaluate(next, c.cost, now);
      p.next_a = next.a;
      p.next_b = next.b;
      creates += p.slot == nullptr;
    }
    if (!decisions[i].allowed && c.enforced) commit = false;
  }
  result.committed = commit;
  const std::span<const Check> checks = batch.checks;
  if (!commit) {
    ReportUncommitted(checks, decisions, pending, now);
    return result;
  }

  // Keys that exist are updated in place: that moves no slot, so the pointers from Find() stay
  // valid. It is all a batch of known keys does.
  const auto update_existing = [&] {
    for (size_t i = 0; i < n; ++i) {
      const Check& c = checks[i];
      const Pending& p = pending[i];
      if (!decisions[i].allowed || c.cost == 0 || c.limit->UsesLog() || p.slot == nullptr) continue;
      const core::State next{p.next_a, p.next_b};
      Shard::Update(*p.slot, next, c.limit->ExpiresAt(next));
    }
  };
  if (creates == 0) {
    update_existing();
    return result;
  }

  // Near max_keys, room is made before anything changes: a batch whose new keys cannot have it
  // (every candidate for eviction still rejects its client) is rejected whole. Then the keys
  // that exist, and the new keys and logs, whose insertion moves slots.
  if (!shard.Fits(creates) && !shard.MakeRoomFor(checks, decisions, pending, now, stats_)) {
    result.committed = false;
    return result;
  }
  update_existing();
  for (size_t i = 0; i < n; ++i) {
    const Check& c = checks[i];
    const Pending& p = pending[i];
    if (!decisions[i].allowed || c.cost == 0 || p.digest.h1 == kNotStored) continue;
    if (c.limit->UsesLog()) {
      LogEntry& entry = shard.LogFor(p.digest, *c.limit);
      decisions[i] = c.limit->Evaluate(entry.log, c.cost, now);
      entry.expires_us = c.limit->ExpiresAt(entry.log).unix_micros();
    } else if (p.slot == nullptr) {
      const core::State next{p.next_a, p.next_b};
      shard.Put(p.digest, *c.limit, next, c.limit->ExpiresAt(next));
    }
  }
  return result;
}

size_t MemoryStore::Sweep(core::Instant now) {
  size_t dropped = 0;
  for (auto& shard : shards_) {
    std::lock_guard lock(shard->mu);
    dropped += shard->Sweep(now, stats_);
  }
  return dropped;
}

size_t MemoryStore::size() const {
  size_t n = 0;
  for (const auto& shard : shards_) {
    std::lock_guard lock(shard->mu);
    n += shard->size();
  }
  return n;
}

size_t MemoryStore::MemoryBytes() const {
  size_t n = 0;
  for (const auto& shard : shards_) {
    std::lock_guard lock(shard->mu);
    n += shard->MemoryBytes();
  }
  return n;
}

}  // namespace tollgate::store
