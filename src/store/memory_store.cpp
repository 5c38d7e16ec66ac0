#include <tollgate/store/memory_store.hpp>

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>

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

// Batches that ApplyNowMany() prepares ahead of the one it decides.
constexpr size_t kAhead = 8;

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
// quarter of a hot-key batch (perf; docs/benchmarks/history.md), where two overlapping 4-byte loads
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

size_t MemoryStore::Forget(const Batch& batch) {
  size_t forgotten = 0;
  for (const Check& c : batch.checks) {
    const ScopeHash scope = HashScope(c.scope.empty() ? batch.scope : c.scope);
    Shard& shard = *shards_[ShardIndex(scope, shards_.size())];
    std::lock_guard lock(shard.mu);
    forgotten += shard.Forget(DigestOf(scope, c.name, c.limit->algorithm()), c.limit->UsesLog());
  }
  return forgotten;
}

void MemoryStore::Apply(const Batch& batch, std::span<core::Decision> decisions, Completion done) {
  done(ApplyNow(batch, decisions));
}

ApplyResult MemoryStore::ApplyNow(const Batch& batch, std::span<core::Decision> decisions) {
  std::array<Pending, kMaxChecks> pending;
  return Decide(batch, decisions, Prepare(batch, pending), pending);
}

void MemoryStore::ApplyNowMany(std::span<const Batch> batches, std::span<core::Decision> decisions,
                               std::span<ApplyResult> results) {
  assert(results.size() >= batches.size());
  const size_t count = std::min(batches.size(), results.size());
  // A ring of the next kAhead batches, prepared (hashed, their slots being loaded) before their
  // turn: deciding batch i overlaps the misses of batches i + 1 .. i + kAhead. Preparing
  // changes nothing, so deciding in order gives what ApplyNow() one after another gives.
  std::array<std::array<Pending, kMaxChecks>, kAhead> ring;
  std::array<Shard*, kAhead> shard_of;
  for (size_t i = 0; i < std::min(kAhead, count); ++i) shard_of[i] = Prepare(batches[i], ring[i]);
  size_t offset = 0;
  for (size_t i = 0; i < count; ++i) {
    const size_t r = i % kAhead;
    const Batch& batch = batches[i];
    results[i] =
        Decide(batch, decisions.subspan(std::min(offset, decisions.size())), shard_of[r], ring[r]);
    offset += batch.checks.size();
    if (i + kAhead < count) shard_of[r] = Prepare(batches[i + kAhead], ring[r]);
  }
}

MemoryStore::Shard* MemoryStore::Prepare(const Batch& batch, std::span<Pending> pending) const {
  const size_t n = batch.checks.size();
  if (n > kMaxChecks) return nullptr;
  for (const Check& c : batch.checks) {
    if (!c.scope.empty() && c.scope != batch.scope) return nullptr;
  }
  const ScopeHash scope = HashScope(batch.scope);
  Shard& shard = *shards_[ShardIndex(scope, shards_.size())];
  // Hashing and prefetching before taking the lock: with many keys each check's slot is a cache
  // miss, and the misses of a batch's checks then overlap instead of following one another.
  for (size_t i = 0; i < n; ++i) {
    const Check& c = batch.checks[i];
    pending[i].digest = DigestOf(scope, c.name, c.limit->algorithm());
    if (!c.limit->UsesLog()) shard.Prefetch(pending[i].digest);
  }
  return &shard;
}

ApplyResult MemoryStore::Decide(const Batch& batch, std::span<core::Decision> decisions,
                                Shard* shard_or_null, std::span<Pending> pending) {
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
  if (shard_or_null == nullptr) return ApplyAcrossShards(batch, decisions, now);
  Shard& shard = *shard_or_null;

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

ApplyResult MemoryStore::ApplyAcrossShards(const Batch& batch, std::span<core::Decision> decisions,
                                           core::Instant now) {
  ApplyResult result;
  result.now = now;
  const size_t n = batch.checks.size();
  // The checks in shard order (no allocation): each shard's run is one contiguous part, which
  // that shard's steps take as a batch of their own.
  std::array<size_t, kMaxChecks> shard_of;
  std::array<size_t, kMaxChecks> order;
  std::array<Check, kMaxChecks> checks;
  std::array<core::Decision, kMaxChecks> ds;
  std::array<Pending, kMaxChecks> pending;
  std::array<ScopeHash, kMaxChecks> scope_of;
  const ScopeHash batch_scope = HashScope(batch.scope);
  for (size_t i = 0; i < n; ++i) {
    const Check& c = batch.checks[i];
    scope_of[i] = c.scope.empty() ? batch_scope : HashScope(c.scope);
    shard_of[i] = ShardIndex(scope_of[i], shards_.size());
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n),
                   [&](size_t a, size_t b) { return shard_of[a] < shard_of[b]; });
  for (size_t k = 0; k < n; ++k) {
    const Check& c = batch.checks[order[k]];
    checks[k] = c;
    pending[k] = Pending{DigestOf(scope_of[order[k]], c.name, c.limit->algorithm()), nullptr, 0, 0};
  }
  // Runs of one shard: [begin, end) in the order above, ascending shard index. One order for
  // every caller that holds more than one shard: no two can wait on each other.
  struct Run {
    size_t shard, begin, end, creates;
  };
  std::array<Run, kMaxChecks> runs;
  size_t n_runs = 0;
  for (size_t k = 0; k < n; ++k) {
    if (n_runs == 0 || runs[n_runs - 1].shard != shard_of[order[k]]) {
      runs[n_runs++] = Run{shard_of[order[k]], k, k, 0};
    }
    runs[n_runs - 1].end = k + 1;
  }
  std::array<std::unique_lock<std::mutex>, kMaxChecks> locks;
  for (size_t r = 0; r < n_runs; ++r) locks[r] = std::unique_lock(shards_[runs[r].shard]->mu);

  const std::span<Check> all_checks(checks.data(), n);
  const std::span<core::Decision> all_ds(ds.data(), n);
  const std::span<Pending> all_pending(pending.data(), n);
  auto part = [](auto span, const Run& r) { return span.subspan(r.begin, r.end - r.begin); };
  auto finish = [&](bool committed, const Run* refused) {
    if (!committed) {
      for (size_t r = 0; r < n_runs; ++r) {
        if (&runs[r] == refused) continue;  // its decisions say why (MakeRoomFor rewrote them)
        ReportUncommitted(part(all_checks, runs[r]), part(all_ds, runs[r]),
                          part(all_pending, runs[r]), now);
      }
    }
    for (size_t k = 0; k < n; ++k) decisions[order[k]] = ds[k];
    result.committed = committed;
    return result;
  };
  bool commit = true;
  for (size_t r = 0; r < n_runs; ++r) {
    const Batch one{.scope = batch.scope, .checks = part(all_checks, runs[r]), .mode = batch.mode};
    commit &= shards_[runs[r].shard]->Evaluate(one, part(all_ds, runs[r]),
                                               part(all_pending, runs[r]), now, runs[r].creates);
  }
  if (!commit) return finish(false, nullptr);
  // Room first, in every shard: a batch whose new keys one shard cannot take stores nothing.
  for (size_t r = 0; r < n_runs; ++r) {
    Shard& shard = *shards_[runs[r].shard];
    if (runs[r].creates == 0 || shard.Fits(runs[r].creates)) continue;
    if (!shard.MakeRoomFor(part(all_checks, runs[r]), part(all_ds, runs[r]),
                           part(all_pending, runs[r]), now, stats_)) {
      return finish(false, &runs[r]);
    }
  }
  for (size_t r = 0; r < n_runs; ++r) {
    Shard::UpdateExisting(part(all_checks, runs[r]), part(all_ds, runs[r]),
                          part(all_pending, runs[r]));
    shards_[runs[r].shard]->StoreNew(part(all_checks, runs[r]), part(all_ds, runs[r]),
                                     part(all_pending, runs[r]), now);
  }
  return finish(true, nullptr);
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
