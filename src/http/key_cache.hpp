// A worker's cache of presented API keys and the keys they resolve to, so that a busy key is
// hashed with SHA-256 once, not on every request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <absl/container/flat_hash_map.h>

#include <tollgate/policy/policy.hpp>
#include <tollgate/util/hash.hpp>

namespace tollgate::http {

// Not thread-safe; owned by one worker.
//
// Exact up to kMaxCachedKeys keys; past that it starts over (a flood of made-up keys cannot grow
// it). Its entries belong to one policy generation: a lookup under another generation starts it
// over, so a key is never resolved against a policy it was not looked up in.
// Open addressing: with many keys, std::unordered_map's lookup was three dependent cache misses
// and a division per request.
class KeyCache {
 public:
  static constexpr size_t kMaxCachedKeys = 1 << 16;

  // The key `presented` resolves to under `pol` (nullptr: unknown), which is the policy of
  // `generation`: from the cache when it was looked up before under the same generation.
  const policy::Key* Find(const policy::Policy& pol, uint64_t generation,
                          std::string_view presented) {
    if (generation != generation_) {
      keys_.clear();  // entries of older generations point into a policy that may be gone
      generation_ = generation;
    } else if (auto it = keys_.find(presented); it != keys_.end()) {
      return it->second;
    }
    if (keys_.size() >= kMaxCachedKeys) keys_.clear();
    return keys_.emplace(presented, pol.FindByKey(presented)).first->second;
  }

  // The presented keys cached now (at most kMaxCachedKeys).
  size_t size() const { return keys_.size(); }

 private:
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return util::Hash64(s); }
  };
  uint64_t generation_ = 0;
  absl::flat_hash_map<std::string, const policy::Key*, KeyHash, std::equal_to<>> keys_;
};

}  // namespace tollgate::http
