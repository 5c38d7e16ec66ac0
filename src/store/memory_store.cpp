#include <tollgate/store/memory_store.hpp>

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <tollgate/util/hash.hpp>

namespace tollgate::store {
namespace {

constexpr size_t kMaxChecks = 16;
constexpr double kMaxLoad = 0.8;
constexpr uint64_t kScopeSeed = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kScopeSeed2 = 0xc2b2ae3d27d4eb4full;
constexpr uint64_t kNameSeed = 0x165667b19e3779f9ull;
constexpr uint64_t kDigestSalt = 0x27d4eb2f165667c5ull;
constexpr uint64_t kDigestSalt2 = 0x94d049bb133111ebull;
// Slot tables at least this large are placed on transparent huge pages (see SlotArena).
constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kHugePageMinTable = 4 * kHugePageBytes;
// Between two sweeps triggered by a full shard: a shard full of live keys evicts by sampling
// instead of scanning itself on every insert.
constexpr int64_t kMinSweepIntervalUs = 1'000'000;
// Candidates examined when a live key must be evicted.
constexpr size_t kEvictionSample = 16;

// One key: 32 bytes. h1 == 0 marks an empty slot (real digests have their low bit set).
struct Slot {
  uint64_t h1;
  uint32_t h2;
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
  uint32_t h2;
};

// Two independent hashes of a batch's scope. With the check's name and algorithm they give each
// key a 96-bit digest (h1, h2), by which alone the table identifies it.
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
// Check names are short ("burst", "daily"). util::Hash64 copies a string shorter than 8 bytes
// through a stack buffer, and the 8-byte load after the byte stores misses store-to-load
// forwarding: with two such hashes per check that was about a quarter of a hot-key batch (perf;
// docs/benchmarks.md). Two overlapping 4-byte loads read the same bytes without the stall.
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
                static_cast<uint32_t>(util::internal::Mix(scope.b ^ bits, kDigestSalt2 ^ salt))};
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

  // REQUIRES: mu held. The pointer stays valid until the next Put() of a new key or Sweep().
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

  // Stores `state` for `d`, making room first if the shard is full. REQUIRES: mu held.
  void Put(Digest d, const core::State& state, core::Instant expires, core::Instant now,
           MemoryStoreStats& stats) {
    if (Slot* s = Find(d)) {
      Update(*s, state, expires);
      return;
    }
    if (count_ >= max_keys_) MakeRoom(now, stats);
    size_t i = Home(d.h1);
    while (slots_[i].h1 != 0) i = Next(i);
    slots_[i] = Slot{d.h1, d.h2, ToExpirySeconds(expires), state};
    ++count_;
  }

  core::LogState* FindLog(Digest d) {
    auto it = logs_.find(d.h1);
    return it == logs_.end() ? nullptr : &it->second;
  }

  core::LogState& LogFor(Digest d, core::Instant now, MemoryStoreStats& stats) {
    if (core::LogState* log = FindLog(d)) return *log;
    if (logs_.size() >= max_keys_) {
      SweepLogs(now, stats);
      if (logs_.size() >= max_keys_) {
        logs_.erase(logs_.begin());
        stats.evicted_live.fetch_add(1, std::memory_order_relaxed);
      }
    }
    return logs_[d.h1];
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
    size_t bytes = capacity_ * sizeof(Slot);
    for (const auto& [h, log] : logs_) {
      bytes += sizeof(log) + 32 + log.size() * sizeof(core::LogState::Entry);
    }
    return bytes;
  }

  // Logs need the limit to know their window; the store records it beside them.
  void SetLogExpiry(Digest d, core::Instant expires) { log_expiry_[d.h1] = expires.unix_micros(); }

 private:
  size_t Home(uint64_t h) const {
    return static_cast<size_t>((static_cast<unsigned __int128>(h) * capacity_) >> 64);
  }
  size_t Next(size_t i) const { return i + 1 == capacity_ ? 0 : i + 1; }

  void MakeRoom(core::Instant now, MemoryStoreStats& stats) {
    if (now.unix_micros() - last_sweep_us_ >= kMinSweepIntervalUs) Sweep(now, stats);
    if (count_ < max_keys_) return;
    // Evict the sampled entry nearest to expiry. Start from a position that moves on every
    // eviction so that the sample covers the table over time.
    size_t best = SIZE_MAX;
    size_t i = eviction_cursor_;
    for (size_t seen = 0, steps = 0; seen < kEvictionSample && steps < capacity_; ++steps) {
      if (slots_[i].h1 != 0) {
        if (best == SIZE_MAX || slots_[i].expires_s < slots_[best].expires_s) best = i;
        ++seen;
      }
      i = Next(i);
    }
    eviction_cursor_ = i;
    assert(best != SIZE_MAX);
    const bool expired = static_cast<int64_t>(slots_[best].expires_s) * 1'000'000 <= now.unix_micros();
    (expired ? stats.expired : stats.evicted_live).fetch_add(1, std::memory_order_relaxed);
    Erase(best);
  }

  // Backward-shift deletion keeps linear probing free of tombstones.
  void Erase(size_t hole) {
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
      auto exp = log_expiry_.find(it->first);
      if (it->second.empty() || (exp != log_expiry_.end() && exp->second <= now.unix_micros())) {
        if (exp != log_expiry_.end()) log_expiry_.erase(exp);
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
  std::unordered_map<uint64_t, core::LogState> logs_;
  std::unordered_map<uint64_t, int64_t> log_expiry_;
};

MemoryStore::MemoryStore(MemoryStoreOptions options, const util::Clock& clock) : clock_(clock) {
  assert(options.max_keys > 0 && options.shards > 0);
  const size_t shards = std::min(options.shards, options.max_keys);
  const size_t per_shard = (options.max_keys + shards - 1) / shards;
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

  const ScopeHash scope{util::Hash64(batch.scope, kScopeSeed),
                        util::Hash64(batch.scope, kScopeSeed2)};
  Shard& shard = *shards_[static_cast<size_t>(
      (static_cast<unsigned __int128>(scope.a) * shards_.size()) >> 64)];

  // Left uninitialised: zeroing kMaxChecks states on every batch showed in profiles.
  struct Pending {
    Digest digest;
    Slot* slot;      // the key's slot when it exists
    int64_t next_a;  // the state after this check, applied on commit
    int64_t next_b;
  };
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
  bool inserts = false;
  for (size_t i = 0; i < n; ++i) {
    const Check& c = batch.checks[i];
    Pending& p = pending[i];
    if (c.limit->UsesLog()) {
      // Never records here; the recording Evaluate follows on commit.
      core::LogState empty;
      core::LogState* log = shard.FindLog(p.digest);
      decisions[i] = c.limit->Peek(log ? *log : empty, c.cost, now);
      inserts = true;
    } else {
      p.slot = shard.Find(p.digest);
      core::State next = p.slot ? p.slot->state : core::State{};
      decisions[i] = c.limit->Evaluate(next, c.cost, now);
      p.next_a = next.a;
      p.next_b = next.b;
      inserts = inserts || p.slot == nullptr;
    }
    if (!decisions[i].allowed && c.enforced) commit = false;
  }
  result.committed = commit;
  if (!commit) {
    // Nothing changes, so allowed checks report their state as it is, not after a debit that
    // did not happen (the headers of a 429 stay honest).
    for (size_t i = 0; i < n; ++i) {
      const Check& c = batch.checks[i];
      if (!decisions[i].allowed || c.cost == 0 || c.limit->UsesLog()) continue;
      core::State now_state = pending[i].slot ? pending[i].slot->state : core::State{};
      decisions[i] = c.limit->Evaluate(now_state, 0, now);
    }
    return result;
  }

  // Keys that exist first, in place: that moves no slot, so the pointers from Find() stay valid.
  // Then new keys and logs, whose insertion may sweep or evict and so move slots.
  for (size_t i = 0; i < n; ++i) {
    const Check& c = batch.checks[i];
    const Pending& p = pending[i];
    if (!decisions[i].allowed || c.cost == 0 || c.limit->UsesLog() || p.slot == nullptr) continue;
    const core::State next{p.next_a, p.next_b};
    Shard::Update(*p.slot, next, c.limit->ExpiresAt(next));
  }
  if (!inserts) return result;
  for (size_t i = 0; i < n; ++i) {
    const Check& c = batch.checks[i];
    const Pending& p = pending[i];
    if (!decisions[i].allowed || c.cost == 0) continue;
    if (c.limit->UsesLog()) {
      core::LogState& log = shard.LogFor(p.digest, now, stats_);
      decisions[i] = c.limit->Evaluate(log, c.cost, now);
      shard.SetLogExpiry(p.digest, c.limit->ExpiresAt(log));
    } else if (p.slot == nullptr) {
      const core::State next{p.next_a, p.next_b};
      shard.Put(p.digest, next, c.limit->ExpiresAt(next), now, stats_);
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
