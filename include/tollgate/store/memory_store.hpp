// The in-memory store: one process, no dependencies.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <tollgate/store/store.hpp>
#include <tollgate/util/clock.hpp>

namespace tollgate::store {

struct MemoryStoreOptions {
  // Most keys held at once (one key = one check of one identity). When full, expired and fully
  // recovered state is dropped first (a full bucket carries no information), then the entries
  // nearest to expiry. Default: 1,000,000 (about 40 MB). REQUIRES: > 0.
  size_t max_keys = 1'000'000;
  // Independent locks; a batch locks one. Default: 64. REQUIRES: > 0.
  size_t shards = 64;
};

// Counters for /metrics. Thread-safe (relaxed atomics).
struct MemoryStoreStats {
  std::atomic<uint64_t> evicted_live{0};   // dropped while still holding information
  std::atomic<uint64_t> expired{0};        // dropped after expiry
};

// Thread-safe: state is split into shards, each behind its own mutex. Every Apply() completes
// before it returns. Each key costs 32 bytes in a fixed open-addressing table sized for
// max_keys at 80 % load (~40 bytes per key), allocated once; sliding-window logs keep their
// entries beside it (O(limit) per key).
class MemoryStore final : public Store {
 public:
  explicit MemoryStore(MemoryStoreOptions options = {},
                       const util::Clock& clock = util::SystemClock::Instance());
  ~MemoryStore() override;

  void Apply(const Batch& batch, std::span<core::Decision> decisions, Completion done) override;
  std::string_view Name() const override { return "memory"; }

  // Synchronous form of Apply(): the memory store never fails.
  ApplyResult ApplyNow(const Batch& batch, std::span<core::Decision> decisions);

  // Drops every expired key. Called periodically by the server; inserts into a full shard
  // also sweep. Returns the number of keys dropped.
  size_t Sweep(core::Instant now);

  // Keys held now (fixed-size states and logs).
  size_t size() const;
  // Bytes allocated for state, including logs.
  size_t MemoryBytes() const;
  const MemoryStoreStats& stats() const { return stats_; }

 private:
  class Shard;
  const util::Clock& clock_;
  std::vector<std::unique_ptr<Shard>> shards_;
  MemoryStoreStats stats_;
};

}  // namespace tollgate::store
