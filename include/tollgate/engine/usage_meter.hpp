// Usage metering: what each key and account used, per UTC day and month, by outcome class.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <tollgate/core/result.hpp>
#include <tollgate/core/time.hpp>
#include <tollgate/store/usage.hpp>

namespace tollgate::engine {

// The UTC days of a period label: "2026-11-29" (a day) or "2026-11" (a month). Errors name
// the expected format.
core::Result<std::vector<std::string>> DaysOfPeriod(std::string_view period);

// One row of an export: an account's key over a whole period.
struct UsageRecord {
  std::string period;
  std::string account;
  std::string key_id;
  store::UsageCounts counts;
};

// Thread-safe. Record() only adds to an in-process buffer (no I/O on the request path); Flush()
// hands the buffer to the backend, which the gateway calls every second and at shutdown.
class UsageMeter {
 public:
  explicit UsageMeter(store::UsageBackend& backend) : backend_(backend) {}

  void Record(std::string_view account, std::string_view key_id, store::Outcome outcome,
              int64_t cost, core::Instant now);
  void Flush();

  // Usage over `period` ("2026-11" or "2026-11-29"), for one account or all (empty), one
  // record per account and key, sorted. Flushes first. `done` may run on another thread.
  void Query(std::string_view period, std::string account,
             std::function<void(core::Result<std::vector<UsageRecord>>)> done);

 private:
  store::UsageBackend& backend_;
  std::mutex mu_;
  store::UsageRows pending_;
};

// CSV with a header line: period,account,key_id,<outcome>_requests...,<outcome>_cost...
std::string UsageCsv(const std::vector<UsageRecord>& records);
std::string UsageJson(const std::vector<UsageRecord>& records);

}  // namespace tollgate::engine
