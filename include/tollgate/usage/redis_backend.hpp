// Usage counts in Redis: they survive gateway restarts and add up across replicas.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include <tollgate/store/redis_store.hpp>
#include <tollgate/usage/usage.hpp>

namespace tollgate::usage {

// Thread-safe. Layout: a hash <prefix>:{usage:<account>}:<day> with fields
// "<key_id>|<outcome>|requests" and "<key_id>|<outcome>|cost", and a set <prefix>:usage:<day>
// of the accounts seen that day; both expire after `retention_days` (default 400).
// A flush sends one HINCRBY per counter that moved, in one hand-over to the store's thread; the
// hash's EXPIRE and the day's SADD and EXPIRE go with every flush of an account-day until Redis
// has confirmed all three once (per process, and again after any lost connection), and then no
// more. Counts Redis never got (the connection was down) go again with the next flush.
class RedisUsageBackend final : public UsageBackend {
 public:
  RedisUsageBackend(store::RedisStore& redis, std::string prefix, int retention_days = 400)
      : redis_(redis), prefix_(std::move(prefix)), retention_s_(int64_t{retention_days} * 86'400) {}
  // Also sends again the rows of earlier flushes that never reached Redis (the connection was
  // down): an empty `deltas` retries them.
  void Add(const UsageDeltas& deltas) override;
  void Read(std::vector<std::string> days, std::string account,
            std::function<void(core::Result<UsageRows>)> done) override;

 private:
  store::RedisStore& redis_;
  const std::string prefix_;
  const int64_t retention_s_;
  // "<day>|<account>" whose TTLs and index entry Redis confirmed. Shared with the replies.
  struct Indexed {
    std::mutex mu;
    std::unordered_set<std::string> done;
    uint64_t reconnects = 0;  // the store's count when `done` was last valid
  };
  std::shared_ptr<Indexed> indexed_ = std::make_shared<Indexed>();
  // Counts that never reached Redis, merged per row, for the next flush.
  struct Unsent {
    std::mutex mu;
    std::unordered_map<UsageKey, UsageCounts, UsageKeyHash> rows;
  };
  std::shared_ptr<Unsent> unsent_ = std::make_shared<Unsent>();
  struct Flight;
  static std::string DayAccount(const UsageKey& k);  // the key of `indexed_->done`
};

}  // namespace tollgate::usage
