#include <tollgate/store/memory_store.hpp>

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <tollgate/metrics/metrics.hpp>
#include <tollgate/util/hash.hpp>

#include "store/memory_shard.hpp"

namespace tollgate::store {
namespace internal {

// Slot tables at least this large are placed on transparent huge pages (see SlotArena).
constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kHugePageMinTable = 4 * kHugePageBytes;

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

}  // namespace internal

namespace {

using internal::Digest;
using internal::kMaxChecks;
using internal::Pending;
using internal::ReportUncommitted;
using internal::SlotArena;
using internal::SlotsPerShard;

constexpr uint64_t kScopeSeed = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kNameSeed = 0x165667b19e3779f9ull;
constexpr uint64_t kDigestSalt = 0x27d4eb2f165667c5ull;
constexpr uint64_t kDigestSalt2 = 0x94d049bb133111ebull;

// Two hashes of a batch's scope (the halves of one XXH3-128). With the check's name and algorithm
// they give each key a 79-bit digest (h1 with its low bit set, h2), by which alone the table
// identifies it: with a million keys in a shard, two keys share one with odds of about 2^-40. The
// other 16 bits of the 96 a slot has for it name the key's limit (Slot::limit_id).
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

ScopeHash HashScope(std::string_view scope) {
  const util::Hash128Value h = util::Hash128(scope, kScopeSeed);
  return ScopeHash{h.low, h.high};
}

size_t ShardIndex(const ScopeHash& scope, size_t shards) {
  return static_cast<size_t>((static_cast<unsigned __int128>(scope.a) * shards) >> 64);
}

// The key of one check: the scope is hashed once per batch, the name once per check.
Digest DigestOf(const ScopeHash& scope, std::string_view name, core::Algorithm algorithm) {
  const uint64_t bits = NameBits(name);
  const uint64_t salt = (static_cast<uint64_t>(algorithm) << 32) ^ name.size();
  return Digest{util::internal::Mix(scope.a ^ bits, kDigestSalt ^ salt) | 1,
                static_cast<uint16_t>(util::internal::Mix(scope.b ^ bits, kDigestSalt2 ^ salt))};
}

}  // namespace

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

void MemoryStore::Apply(const Batch& batch, std::span<core::Decision> decisions, Completion done) {
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

  for (const Check& c : batch.checks) {
    if (!c.scope.empty() && c.scope != batch.scope) return ApplyAcrossShards(batch, decisions, now);
  }
  const ScopeHash scope = HashScope(batch.scope);
  Shard& shard = *shards_[ShardIndex(scope, shards_.size())];

  std::array<Pending, kMaxChecks> pending;
  // Hashing and prefetching before taking the lock: with many keys each check's slot is a cache
  // miss, and the misses of a batch's checks then overlap instead of following one another.
  for (size_t i = 0; i < n; ++i) {
    const Check& c = batch.checks[i];
    pending[i].digest = DigestOf(scope, c.name, c.limit->algorithm());
    if (!c.limit->UsesLog()) shard.Prefetch(pending[i].digest);
  }

  std::lock_guard lock(shard.mu);
  size_t creates = 0;
  const bool commit = shard.Evaluate(batch, decisions, pending, now, creates);
  result.committed = commit;
  const std::span<const Check> checks = batch.checks;
  if (!commit) {
    ReportUncommitted(checks, decisions, pending, now);
    return result;
  }
  if (creates == 0) {
    Shard::UpdateExisting(checks, decisions, pending);
    return result;
  }

  // Near max_keys, room is made before anything changes: a batch whose new keys cannot have it
  // (every candidate for eviction still rejects its client) is rejected whole. Then the keys
  // that exist, and the new keys and logs, whose insertion moves slots.
  if (!shard.Fits(creates) && !shard.MakeRoomFor(checks, decisions, pending, now, stats_)) {
    result.committed = false;
    return result;
  }
  Shard::UpdateExisting(checks, decisions, pending);
  shard.StoreNew(checks, decisions, pending, now);
  return result;
}

namespace {

// The checks of a batch that live in one shard, gathered for that shard's steps.
struct ShardGroup {
  size_t shard = 0;
  std::vector<size_t> index;  // into the batch
  std::vector<Check> checks;
  std::vector<core::Decision> decisions;
  std::vector<Pending> pending;
  size_t creates = 0;
};

}  // namespace

ApplyResult MemoryStore::ApplyAcrossShards(const Batch& batch, std::span<core::Decision> decisions,
                                           core::Instant now) {
  ApplyResult result;
  result.now = now;
  const size_t n = batch.checks.size();
  // Rare (route limits of another scope than the caller's): vectors, not the fast path's arrays.
  std::vector<ShardGroup> groups;
  const ScopeHash batch_scope = HashScope(batch.scope);
  for (size_t i = 0; i < n; ++i) {
    const Check& c = batch.checks[i];
    const ScopeHash scope = c.scope.empty() ? batch_scope : HashScope(c.scope);
    const size_t shard = ShardIndex(scope, shards_.size());
    auto g = std::find_if(groups.begin(), groups.end(),
                          [shard](const ShardGroup& x) { return x.shard == shard; });
    if (g == groups.end()) g = groups.insert(groups.end(), ShardGroup{.shard = shard});
    g->index.push_back(i);
    g->checks.push_back(c);
    g->decisions.emplace_back();
    g->pending.push_back(Pending{DigestOf(scope, c.name, c.limit->algorithm()), nullptr, 0, 0});
  }
  // One order for every caller that holds more than one shard: no two can wait on each other.
  std::sort(groups.begin(), groups.end(),
            [](const ShardGroup& a, const ShardGroup& b) { return a.shard < b.shard; });
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(groups.size());
  for (const ShardGroup& g : groups) locks.emplace_back(shards_[g.shard]->mu);

  auto copy_back = [&] {
    for (const ShardGroup& g : groups) {
      for (size_t j = 0; j < g.index.size(); ++j) decisions[g.index[j]] = g.decisions[j];
    }
  };
  auto report_uncommitted = [&](const ShardGroup* except) {
    for (ShardGroup& g : groups) {
      if (&g != except) ReportUncommitted(g.checks, g.decisions, g.pending, now);
    }
    copy_back();
    result.committed = false;
    return result;
  };
  bool commit = true;
  for (ShardGroup& g : groups) {
    const Batch part{.scope = batch.scope, .checks = g.checks, .mode = batch.mode, .now = now};
    commit &= shards_[g.shard]->Evaluate(part, g.decisions, g.pending, now, g.creates);
  }
  if (!commit) return report_uncommitted(nullptr);
  // Room first, in every shard: a batch whose new keys one shard cannot take stores nothing.
  for (ShardGroup& g : groups) {
    Shard& shard = *shards_[g.shard];
    if (g.creates == 0 || shard.Fits(g.creates)) continue;
    if (!shard.MakeRoomFor(g.checks, g.decisions, g.pending, now, stats_)) {
      return report_uncommitted(&g);  // its decisions say why (MakeRoomFor rewrote them)
    }
  }
  for (ShardGroup& g : groups) {
    Shard::UpdateExisting(g.checks, g.decisions, g.pending);
    shards_[g.shard]->StoreNew(g.checks, g.decisions, g.pending, now);
  }
  copy_back();
  result.committed = true;
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

void MemoryStore::ExportMetrics(metrics::Registry& registry) const {
  registry.Gauge("tollgate_store_keys", "Keys held by the memory store.",
                 [this] { return static_cast<double>(size()); });
  registry.CounterFrom("tollgate_store_evictions_total",
                       "Live keys evicted from the full memory store.",
                       metrics::ReadOf(stats_.evicted_live));
  registry.CounterFrom("tollgate_store_full_rejections_total",
                       "New identities rejected because the memory store was full of state that "
                       "still restricts a client.",
                       metrics::ReadOf(stats_.full_rejections));
}

}  // namespace tollgate::store
