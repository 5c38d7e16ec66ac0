// Usage metering: what each key and account used, per UTC day and month, by outcome class.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <tollgate/core/result.hpp>
#include <tollgate/core/time.hpp>
#include <tollgate/usage/usage.hpp>

namespace tollgate::usage {

// The UTC days of a period label: "2026-11-29" (a day) or "2026-11" (a month). Errors name
// the expected format.
core::Result<std::vector<std::string>> DaysOfPeriod(std::string_view period);

// One row of an export: an account's key over a whole period.
struct UsageRecord {
  std::string period;
  std::string account;
  std::string key_id;
  usage::UsageCounts counts;
};

// What names one key to UsageMeter::Record while it lives: its address (compared, never
// dereferenced) and an epoch within which no other key has that address (the gateway: its
// policy's generation, which holds every key of it alive and unique).
struct MeterTag {
  const void* key = nullptr;  // null: no tag (the row is found by hashing the strings)
  uint64_t epoch = 0;
  bool operator==(const MeterTag&) const = default;
};

// Thread-safe. Record() only adds to an in-process buffer (no I/O on the request path); Flush()
// hands the buffer to the backend: the gateway flushes a slice every 100 ms, and everything
// before a query and at shutdown.
class UsageMeter {
 public:
  // The rows are dealt to `slices` slices, round robin as they are created.
  explicit UsageMeter(usage::UsageBackend& backend, size_t slices = 1)
      : backend_(backend), slices_(slices == 0 ? 1 : slices) {}
  size_t slices() const { return slices_; }

  // `tag`, if given, names the caller's key: its row is found in the meter's own cache by the
  // tag rather than by hashing the strings, while the row lasts and its day holds.
  void Record(std::string_view account, std::string_view key_id, usage::Outcome outcome,
              int64_t cost, core::Instant now, MeterTag tag = {});
  // Starts loading `tag`'s cache entry, for a Record() of it later in the request (with many
  // keys the entry is rarely in the CPU's cache). Reads nothing; any thread, no lock.
  void Prefetch(MeterTag tag) const { __builtin_prefetch(&cache_[CacheIndex(tag)]); }
  // Every row.
  void Flush();
  // The rows of one slice (slice < slices): called with slice 0, 1, ... in turn, each row goes
  // once every `slices` calls, so a key's counts of that time go in one write while the keys
  // are spread over the calls.
  void Flush(size_t slice);

  // Usage over `period` ("2026-11" or "2026-11-29"), for one account or all (empty), one
  // record per account and key, sorted. Flushes first. `done` may run on another thread.
  void Query(std::string_view period, std::string account,
             std::function<void(core::Result<std::vector<UsageRecord>>)> done);

 private:
  // What the index is keyed by: views of a row's strings, or of the caller's.
  struct KeyView {
    std::string_view day, account, key_id;
    bool operator==(const KeyView&) const = default;
  };
  struct KeyHash {
    size_t operator()(const KeyView& k) const;
  };

  // A key's counts of one day since the last flush. What a request touches comes first.
  struct Row {
    uint64_t serial = 0;  // bumped when the row is dropped: cache entries naming it go stale
    int64_t day = 0;      // days since the epoch
    usage::UsageCounts counts;
    usage::UsageKey key;
  };
  // The row a tag last counted into, as it was then (direct-mapped by the tag's bits).
  struct Cached {
    MeterTag tag;
    Row* row = nullptr;
    uint64_t serial = 0;
  };
  static constexpr int kCacheBits = 14;  // 16,384 entries, 512 KiB
  static size_t CacheIndex(MeterTag tag) {
    const auto bits = reinterpret_cast<uintptr_t>(tag.key) >> 4;
    return (bits * 0x9E3779B97F4A7C15ull) >> (64 - kCacheBits);
  }

  // Hands the counts of slices [first, last) to the backend.
  void Send(size_t first, size_t last);
  // Moves the counts of `slice` into `out` (under mu_).
  void Take(size_t slice, usage::UsageDeltas& out);
  // The row of (day, account, key id), made if there is none (under mu_).
  Row& Find(const KeyView& view, int64_t day);

  usage::UsageBackend& backend_;
  const size_t slices_;
  std::mutex mu_;
  // Hashed, not ordered: a lookup per request of a key without a slot, or whose slot is stale;
  // handed to the backend as a list once per flush (see Flush(): rows outlive a flush).
  // Its keys view the strings of the rows (whose addresses never change).
  std::unordered_map<KeyView, Row*, KeyHash> index_;
  // Every row made, never freed: a dropped one is reused, so that a slot's pointer always
  // points at a Row, whose serial then says whether it is still the slot's.
  std::vector<std::unique_ptr<Row>> rows_;
  std::vector<Row*> free_;
  std::vector<Cached> cache_ = std::vector<Cached>(size_t{1} << kCacheBits);
  // Each slice's rows, so that a flush visits only its own.
  std::vector<std::vector<Row*>> slice_rows_{slices_};
  size_t rows_created_ = 0;
};

// CSV with a header line: period,account,key_id,<outcome>_requests...,<outcome>_cost...
std::string UsageCsv(const std::vector<UsageRecord>& records);
std::string UsageJson(const std::vector<UsageRecord>& records);

}  // namespace tollgate::usage
