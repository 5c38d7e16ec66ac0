// Heavy hitters in bounded memory: the Space-Saving sketch (Metwally, Agrawal, El Abbadi 2005).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tollgate::metrics {

// Counts the weights of a stream of keys in at most `capacity` counters. For every key it holds,
// `count - error <= true weight <= count`; every key whose true weight exceeds total / capacity is
// held; `error <= total / capacity`. Thread-compatible (callers lock).
class SpaceSaving {
 public:
  struct Item {
    std::string key;
    uint64_t count = 0;  // an overestimate of the key's weight
    uint64_t error = 0;  // by at most this much
  };

  explicit SpaceSaving(size_t capacity) : capacity_(capacity) {
    keys_.reserve(capacity);
    counts_.reserve(capacity);
    errors_.reserve(capacity);
  }

  void Add(std::string_view key, uint64_t weight = 1);
  // Adds every counter of `other` (sketches of disjoint streams, e.g. per thread): the result's
  // errors add up, and total() is the sum.
  void Merge(const SpaceSaving& other);
  // The `n` largest counts, largest first.
  std::vector<Item> Top(size_t n) const;
  uint64_t total() const { return total_; }
  size_t capacity() const { return capacity_; }
  void Clear();

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Counters as parallel arrays: the eviction's search for the smallest count reads counts_
  // alone (per request on the gateway, with many distinct keys).
  size_t capacity_;
  uint64_t total_ = 0;
  std::vector<std::string> keys_;
  std::vector<uint64_t> counts_;
  std::vector<uint64_t> errors_;
  std::unordered_map<std::string, size_t, Hash, std::equal_to<>> index_;  // key -> position
  // When full: at most the smallest count (counts only grow), and where the last search for it
  // stopped. With many distinct keys nearly every Add() evicts, and most counters sit at the
  // smallest count: a search from the cursor finds one in a few steps where a scan of every
  // counter per eviction showed in the gateway's profiles.
  uint64_t floor_ = 0;
  size_t cursor_ = 0;
  uint64_t Floor() const;  // the smallest count when full, else 0
  size_t Smallest();       // a counter with the smallest count (full)
};

}  // namespace tollgate::metrics
