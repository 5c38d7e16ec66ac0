// Usage metering: what each key and account used, per UTC day and month, by outcome class.
#pragma once

#include <functional>
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

// Thread-safe. Record() only adds to an in-process buffer (no I/O on the request path); Flush()
// hands the buffer to the backend: the gateway flushes a slice every 100 ms, and everything
// before a query and at shutdown.
class UsageMeter {
 public:
  // The rows are dealt to `slices` slices, round robin as they are created.
  explicit UsageMeter(usage::UsageBackend& backend, size_t slices = 1)
      : backend_(backend), slices_(slices == 0 ? 1 : slices) {}

  void Record(std::string_view account, std::string_view key_id, usage::Outcome outcome,
              int64_t cost, core::Instant now);
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
  // What Record() looks up with: no strings built for a key already in the buffer.
  struct KeyView {
    std::string_view day, account, key_id;
  };
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(const KeyView& k) const;
    size_t operator()(const usage::UsageKey& k) const {
      return (*this)(KeyView{k.day, k.account, k.key_id});
    }
  };
  struct KeyEq {
    using is_transparent = void;
    static KeyView View(const KeyView& k) { return k; }
    static KeyView View(const usage::UsageKey& k) { return {k.day, k.account, k.key_id}; }
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      const KeyView x = View(a), y = View(b);
      return x.day == y.day && x.account == y.account && x.key_id == y.key_id;
    }
  };

  using Rows = std::unordered_map<usage::UsageKey, usage::UsageCounts, KeyHash, KeyEq>;

  // Hands the counts of slices [first, last) to the backend.
  void Send(size_t first, size_t last);
  // Moves the counts of `slice` into `out` (under mu_).
  void Take(size_t slice, usage::UsageDeltas& out);

  usage::UsageBackend& backend_;
  const size_t slices_;
  std::mutex mu_;
  // Hashed, not ordered: a lookup per request; handed to the backend as a list once per flush
  // (see Flush(): rows outlive a flush).
  Rows pending_;
  // Each slice's rows (elements of pending_, whose addresses outlive rehashing), so that a
  // flush visits only its own.
  std::vector<std::vector<Rows::value_type*>> slice_rows_{slices_};
  size_t rows_created_ = 0;
};

// CSV with a header line: period,account,key_id,<outcome>_requests...,<outcome>_cost...
std::string UsageCsv(const std::vector<UsageRecord>& records);
std::string UsageJson(const std::vector<UsageRecord>& records);

}  // namespace tollgate::usage
