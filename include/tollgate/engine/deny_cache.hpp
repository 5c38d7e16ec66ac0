// An exact local cache of denials in front of a shared (Redis) store.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <tollgate/store/store.hpp>
#include <tollgate/util/clock.hpp>

namespace tollgate::metrics {
class Registry;
}

namespace tollgate::engine {

struct DenyCacheOptions {
  // Identities remembered at once; beyond it the oldest are forgotten (a forgotten identity
  // only costs a store call). Default 100,000.
  size_t max_entries = 100'000;
  // How long a bound that covers a leased bucket (`lease: N`) is trusted. Tokens of a lease
  // granted before the store's answer may come back to the bucket when the lease ends (1 s
  // after its grant, seen by the next 100 ms sweep), on any replica, which the bound does not
  // know: past this, the next request asks the store again. Leases granted after the answer
  // took their tokens after it, so giving back what is left of them never breaks the bound.
  // Default 1.5 s (the lease's second, a sweep, and the give-back's round trip). Issue 31.
  core::Duration leased_bound = core::Duration::Millis(1500);
};

struct DenyCacheStats {
  std::atomic<uint64_t> local_rejections{0};  // answered without a store call
  std::atomic<uint64_t> forwarded{0};
};

// Thread-safe. Wraps a store shared by several replicas. After the store answers a batch, the
// cache knows an upper bound of every token bucket's tokens at any later time: the tokens then,
// plus the refill since the request was sent (other replicas can only take tokens away, and
// time since the request left bounds the store clock's progress, whatever the offset between
// the clocks). A request whose cost that bound cannot cover is rejected here, without a store
// call; nothing the store would allow is ever rejected. Its Retry-After comes from the bound,
// so it is never later than the store's. Leases are the exception: a lease's unspent tokens go
// back to the bucket when it ends, so a bound that covers a leased bucket holds only until
// every lease taken before it has ended (DenyCacheOptions::leased_bound).
class DenyCache final : public store::Store {
 public:
  DenyCache(store::Store& inner, DenyCacheOptions options = {},
            const util::Clock& clock = util::SystemClock::Instance());

  void Apply(const store::Batch& batch, std::span<core::Decision> decisions,
             Completion done) override;
  std::string_view Name() const override { return inner_.Name(); }

  // Drops what the cache knows of `scope`, or of every scope (Clear): its counters were reset in
  // the store, which breaks the cache's premise that other replicas only take tokens away.
  void Forget(std::string_view scope);
  void Clear();

  const DenyCacheStats& stats() const { return stats_; }
  void ExportMetrics(metrics::Registry& registry) const;

 private:
  struct CheckBound {
    std::string name;
    const core::Limit* limit;  // identity of the limit: a reload makes new ones
    // A bucket's capacity, tokens and per_micros (zeros otherwise): a reload's new limit may
    // take the address of a freed one, and a bound holds only for the bucket it was made for.
    std::array<int64_t, 3> bucket;
    int64_t level_upper;  // units, at sent_us
    core::Decision last;
  };
  static std::array<int64_t, 3> BucketOf(const core::Limit& limit);
  struct Entry {
    int64_t sent_us;           // local monotonic time the answered request left
    int64_t store_now_us;      // the store's time of that answer
    int64_t trusted_until_us;  // local monotonic; INT64_MAX unless a check is leased
    std::vector<CheckBound> checks;
  };

  // Returns true (and fills decisions) when the batch can be rejected locally.
  bool TryReject(const store::Batch& batch, std::span<core::Decision> decisions, int64_t now_us,
                 store::ApplyResult& result);
  void Record(const std::string& scope, std::span<const store::Check> checks,
              std::span<const core::Decision> decisions, const store::ApplyResult& result,
              int64_t sent_us);

  store::Store& inner_;
  const DenyCacheOptions options_;
  const util::Clock& clock_;  // its steady reading
  std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  DenyCacheStats stats_;
};

}  // namespace tollgate::engine
