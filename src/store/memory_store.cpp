#include <tollgate/store/memory_store.hpp>

#include <algorithm>
#include <array>
#include <cassert>
#include <mutex>
#include <unordered_map>

#include <tollgate/util/hash.hpp>

namespace tollgate::store {
namespace {

constexpr size_t kMaxChecks = 16;
constexpr double kMaxLoad = 0.8;
constexpr uint64_t kScopeSeed = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kScopeSeed2 = 0xc2b2ae3d27d4eb4full;
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

}  // namespace

class MemoryStore::Shard {
 public:
  explicit Shard(size_t max_keys)
      : max_keys_(max_keys),
        slots_(std::max<size_t>(16, static_cast<size_t>(static_cast<double>(max_keys) / kMaxLoad) + 1)) {}

  std::mutex mu;

  // REQUIRES: mu held.
  Slot* Find(Digest d) {
    for (size_t i = Home(d.h1);; i = Next(i)) {
      Slot& s = slots_[i];
      if (s.h1 == 0) return nullptr;
      if (s.h1 == d.h1 && s.h2 == d.h2) return &s;
    }
  }

  // Stores `state` for `d`, making room first if the shard is full. REQUIRES: mu held.
  void Put(Digest d, const core::State& state, core::Instant expires, core::Instant now,
           MemoryStoreStats& stats) {
    if (Slot* s = Find(d)) {
      s->state = state;
      s->expires_s = ToExpirySeconds(expires);
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
    std::vector<Slot> live(slots_.size());
    const size_t before = count_;
    count_ = 0;
    for (const Slot& s : slots_) {
      if (s.h1 == 0 || s.expires_s <= now_s) continue;
      size_t i = Home(s.h1);
      while (live[i].h1 != 0) i = Next(i);
      live[i] = s;
      ++count_;
    }
    slots_.swap(live);
    const size_t dropped = before - count_ + SweepLogs(now, stats);
    stats.expired.fetch_add(before - count_, std::memory_order_relaxed);
    return dropped;
  }

  size_t size() const { return count_ + logs_.size(); }

  size_t MemoryBytes() const {
    size_t bytes = slots_.capacity() * sizeof(Slot);
    for (const auto& [h, log] : logs_) {
      bytes += sizeof(log) + 32 + log.size() * sizeof(core::LogState::Entry);
    }
    return bytes;
  }

  // Logs need the limit to know their window; the store records it beside them.
  void SetLogExpiry(Digest d, core::Instant expires) { log_expiry_[d.h1] = expires.unix_micros(); }

 private:
  size_t Home(uint64_t h) const {
    return static_cast<size_t>((static_cast<unsigned __int128>(h) * slots_.size()) >> 64);
  }
  size_t Next(size_t i) const { return i + 1 == slots_.size() ? 0 : i + 1; }

  void MakeRoom(core::Instant now, MemoryStoreStats& stats) {
    if (now.unix_micros() - last_sweep_us_ >= kMinSweepIntervalUs) Sweep(now, stats);
    if (count_ < max_keys_) return;
    // Evict the sampled entry nearest to expiry. Start from a position that moves on every
    // eviction so that the sample covers the table over time.
    size_t best = SIZE_MAX;
    size_t i = eviction_cursor_;
    for (size_t seen = 0, steps = 0; seen < kEvictionSample && steps < slots_.size(); ++steps) {
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
  std::vector<Slot> slots_;
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
  shards_.reserve(shards);
  for (size_t i = 0; i < shards; ++i) shards_.push_back(std::make_unique<Shard>(per_shard));
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
  const core::Instant now = batch.now.value_or(clock_.Now());
  result.now = now;

  const uint64_t scope_hash = util::Hash64(batch.scope, kScopeSeed);
  const uint64_t scope_hash2 = util::Hash64(batch.scope, kScopeSeed2);
  Shard& shard = *shards_[scope_hash % shards_.size()];

  std::array<Digest, kMaxChecks> digests;
  std::array<core::State, kMaxChecks> next;
  std::lock_guard lock(shard.mu);

  bool commit = batch.mode == Mode::kConsume;
  for (size_t i = 0; i < n; ++i) {
    const Check& c = batch.checks[i];
    const uint64_t algo = static_cast<uint64_t>(c.limit->algorithm()) + 1;
    digests[i] = Digest{util::Hash64(c.name, scope_hash ^ algo) | 1,
                        static_cast<uint32_t>(util::Hash64(c.name, scope_hash2 + algo))};
    if (c.limit->UsesLog()) {
      // Never records here; the recording Evaluate follows on commit.
      core::LogState empty;
      core::LogState* log = shard.FindLog(digests[i]);
      decisions[i] = c.limit->Peek(log ? *log : empty, c.cost, now);
    } else {
      const Slot* slot = shard.Find(digests[i]);
      next[i] = slot ? slot->state : core::State{};
      decisions[i] = c.limit->Evaluate(next[i], c.cost, now);
    }
    if (!decisions[i].allowed && c.enforced) commit = false;
  }
  result.committed = commit;
  if (!commit) return result;

  for (size_t i = 0; i < n; ++i) {
    const Check& c = batch.checks[i];
    if (!decisions[i].allowed || c.cost == 0) continue;
    if (c.limit->UsesLog()) {
      core::LogState& log = shard.LogFor(digests[i], now, stats_);
      decisions[i] = c.limit->Evaluate(log, c.cost, now);
      shard.SetLogExpiry(digests[i], c.limit->ExpiresAt(log));
    } else {
      shard.Put(digests[i], next[i], c.limit->ExpiresAt(next[i]), now, stats_);
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
