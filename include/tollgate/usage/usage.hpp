// Usage metering storage: requests and cost units per account, key, UTC day and outcome class.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <tollgate/core/result.hpp>
#include <tollgate/util/hash.hpp>

namespace tollgate::usage {

// How a metered request ended. Limits count every attempt; billing can exclude client errors.
enum class Outcome : uint8_t {
  kSuccess,      // 2xx and 3xx
  kClientError,  // 4xx other than tollgate's 429
  kServerError,  // 5xx (the upstream's, or tollgate's 502/503/504)
  kRejected,     // rejected by tollgate (429)
};
inline constexpr size_t kOutcomes = 4;
inline constexpr const char* kOutcomeNames[kOutcomes] = {"success", "client_error", "server_error",
                                                         "rejected"};

struct UsageCounts {
  std::array<int64_t, kOutcomes> requests{};
  std::array<int64_t, kOutcomes> cost{};
  void Add(const UsageCounts& o) {
    for (size_t i = 0; i < kOutcomes; ++i) {
      requests[i] += o.requests[i];
      cost[i] += o.cost[i];
    }
  }
};

// Identifies one row: a UTC day ("2026-11-29"), an account and a key id.
struct UsageKey {
  std::string day;
  std::string account;
  std::string key_id;
  auto operator<=>(const UsageKey&) const = default;
};

inline size_t HashUsageKey(std::string_view day, std::string_view account,
                           std::string_view key_id) {
  return util::Hash64(key_id, util::Hash64(account, util::Hash64(day)));
}
struct UsageKeyHash {
  size_t operator()(const UsageKey& k) const { return HashUsageKey(k.day, k.account, k.key_id); }
};

using UsageRows = std::map<UsageKey, UsageCounts>;
// One flush's counts, a row per (day, account, key id) seen since the last, in no order.
using UsageDeltas = std::vector<std::pair<UsageKey, UsageCounts>>;

// Where metered counts live. Implementations are thread-safe.
class UsageBackend {
 public:
  virtual ~UsageBackend() = default;
  // Adds deltas (durably for Redis: they survive a gateway restart).
  virtual void Add(const UsageDeltas& deltas) = 0;
  // Reads the rows of `days`, for one account or all (empty). `done` may run on another thread.
  virtual void Read(std::vector<std::string> days, std::string account,
                    std::function<void(core::Result<UsageRows>)> done) = 0;
};

// In the gateway process: lost on restart (docs/operations.md says so). Keeps at most
// `max_days` distinct days, dropping the oldest. Thread-safe.
class MemoryUsageBackend final : public UsageBackend {
 public:
  explicit MemoryUsageBackend(size_t max_days = 400) : max_days_(max_days) {}
  void Add(const UsageDeltas& deltas) override;
  void Read(std::vector<std::string> days, std::string account,
            std::function<void(core::Result<UsageRows>)> done) override;

 private:
  const size_t max_days_;
  std::mutex mu_;
  std::unordered_map<UsageKey, UsageCounts, UsageKeyHash> rows_;  // sorted when read
  std::set<std::string> days_;                                    // the days in rows_
};

}  // namespace tollgate::usage
