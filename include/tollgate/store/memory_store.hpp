// The in-memory store: one process, no dependencies.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <tollgate/store/store.hpp>
#include <tollgate/util/clock.hpp>

namespace tollgate::metrics {
class Registry;
}

namespace tollgate::store {
namespace internal {
struct Pending;
}

struct MemoryStoreOptions {
  // Most keys held at once (one key = one check of one identity; sliding-window logs are
  // counted apart, up to as many again). Default: 1,000,000 (about 40 MB). REQUIRES: > 0.
  //
  // A new key in a full shard takes the place of the least restrictive of a sample of 16 of its
  // entries (a batch's own keys are never evicted to make room for it). Restrictive means: at
  // the time of the batch, the entry would reject a request of cost 1 (an exhausted bucket, a
  // full window, a quota at its ceiling), or else has used more of its limit (1 - remaining / q).
  // So expired and fully recovered state goes first, then the state that restricts its client
  // least, and state that rejects now never goes while a sampled entry does not: a client
  // cannot clear its own exhausted bucket by creating new identities. While every sampled entry
  // rejects, up to 64 are examined; if all of them reject, the shard is full: the batch is
  // rejected (RejectCode::kRateLimited, remaining 0), nothing of it is stored, and
  // MemoryStoreStats::full_rejections counts it. Its Retry-After is the soonest time at which
  // one of the entries examined stops rejecting (and so becomes evictable); 1 s if none gave a
  // time. Shadow checks never cause that rejection: their new keys are stored only if room is
  // left. An entry is ranked under the limit it was created with (a reload that changes a limit
  // takes effect on its keys' ranking once they expire).
  //
  // A shard holds at least 16 keys (one batch), so fewer than 16 x `shards` keys use fewer
  // shards, and a max_keys under 16 holds 16.
  size_t max_keys = 1'000'000;
  // Independent locks; a batch locks one. Default: 64. REQUIRES: > 0.
  size_t shards = 64;
};

// Counters for /metrics. Thread-safe (relaxed atomics).
struct MemoryStoreStats {
  std::atomic<uint64_t> evicted_live{0};  // dropped while still holding information
  std::atomic<uint64_t> expired{0};       // dropped after expiry
  // Batches rejected because their new keys found a full shard: every candidate for eviction
  // still rejected its client (MemoryStoreOptions::max_keys).
  std::atomic<uint64_t> full_rejections{0};
};

// Thread-safe: state is split into shards, each behind its own mutex. Every Apply() completes
// before it returns. Each key costs 32 bytes in a fixed open-addressing table sized for
// max_keys at 80 % load (~40 bytes per key), allocated once; sliding-window logs keep their
// entries beside it (O(limit) per key). Each shard also keeps one copy of every distinct limit
// its keys use, for eviction.
class MemoryStore final : public Store {
 public:
  explicit MemoryStore(MemoryStoreOptions options = {},
                       const util::Clock& clock = util::SystemClock::Instance());
  ~MemoryStore() override;

  void Apply(const Batch& batch, std::span<core::Decision> decisions, Completion done) override;
  std::string_view Name() const override { return "memory"; }

  // Forgets the state of `batch`'s checks (each in its own scope, or the batch's): the next
  // decision finds them fresh (POST /admin/reset). Returns how many were held.
  size_t Forget(const Batch& batch);

  // Synchronous form of Apply(): the memory store never fails.
  ApplyResult ApplyNow(const Batch& batch, std::span<core::Decision> decisions);

  // ApplyNow() of each of `batches` in turn, with the same decisions, results and final state
  // as those calls made one after another (a batch decided later sees what earlier ones
  // changed, the same key included). Faster for a caller with several batches at hand (a load
  // generator, a replay, a bulk check): while one batch is decided, the slots of the next few
  // are already being loaded, so their cache misses overlap. `decisions` holds the batches'
  // decisions one after another: batch i's start after those of batches 0..i-1 (its check
  // count, even when it failed); `results[i]` is batch i's. REQUIRES: results.size() >=
  // batches.size(). A batch whose decisions do not fit gets ApplyNow()'s kProtocol error.
  void ApplyNowMany(std::span<const Batch> batches, std::span<core::Decision> decisions,
                    std::span<ApplyResult> results);

  // Drops every expired key. Called periodically by the server; inserts into a full shard
  // also sweep. Returns the number of keys dropped.
  size_t Sweep(core::Instant now);

  // Keys held now (fixed-size states and logs).
  size_t size() const;
  // Bytes allocated for state, including logs.
  size_t MemoryBytes() const;
  const MemoryStoreStats& stats() const { return stats_; }
  // Declares the store's gauges and counters (read when /metrics is rendered).
  void ExportMetrics(metrics::Registry& registry) const;

 private:
  class Shard;
  // The first half of ApplyNow(), which needs no lock: hashes `batch`'s checks into `pending`
  // and starts loading their slots. Returns their shard; nullptr when the batch spans scopes or
  // has too many checks (Decide() then takes the slow path or fails).
  Shard* Prepare(const Batch& batch, std::span<internal::Pending> pending) const;
  // The second half: decides `batch` under its shard's lock, reading the clock if it must.
  ApplyResult Decide(const Batch& batch, std::span<core::Decision> decisions, Shard* shard,
                     std::span<internal::Pending> pending);
  // ApplyNow() for a batch whose checks live in more than one scope: every shard involved is
  // locked, in index order, for the whole decision.
  ApplyResult ApplyAcrossShards(const Batch& batch, std::span<core::Decision> decisions,
                                core::Instant now);
  const util::Clock& clock_;
  std::vector<std::unique_ptr<Shard>> shards_;
  MemoryStoreStats stats_;
};

}  // namespace tollgate::store
