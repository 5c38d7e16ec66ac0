// The memory store's eviction rule, the part its shards keep inline: the table of the limits
// their keys use (see memory_eviction.cpp for the ranking and the sampling). Private to src/store.
#pragma once

#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <unordered_map>
#include <variant>
#include <vector>

#include <tollgate/core/limit.hpp>
#include <tollgate/util/hash.hpp>

namespace tollgate::store::internal {

inline constexpr uint64_t kParamsSeed = 0xd6e8feb86659fd93ull;

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
  [[gnu::noinline]] uint16_t AcquireNew(const core::Limit& limit, const Params& params);

  // The id of `params`, made if new (with no key counted yet); kUnknown when none is left.
  uint16_t Insert(const core::Limit& limit, const Params& params);

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

}  // namespace tollgate::store::internal
