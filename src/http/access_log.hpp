// The JSON access log and the bounded-rate event log on stderr.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

#include <tollgate/contract/log_decision.hpp>
#include <tollgate/util/clock.hpp>

namespace tollgate::http {

// Thread-safe line writer for the JSON access log and bounded-rate error log.
class Log {
 public:
  void Access(const std::string& line) {
    std::lock_guard lock(mu_);
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  // An event line: a JSON object, written with a "ts" member first.
  void Error(const std::string& line);
  void Flush() {
    std::lock_guard lock(mu_);
    std::fflush(stdout);
  }

 private:
  std::mutex mu_;
};

using util::AppendIsoNow;

// Views into the policy the request holds (and string literals): the log line, if any, is
// written before the request lets go of it.
struct RequestLog {
  bool metered = false;  // counted in usage (a limited request of a known key)
  std::string_view key_id;
  std::string_view plan;
  std::string_view route;  // the matched route's label (policy::Route); empty: never routed
  // The query parameter the route's cost counts (`cost: {query: pages}`): the one parameter of
  // the query the log keeps (others may carry secrets). Empty: none is logged.
  std::string_view cost_param;
  contract::LogDecision decision = contract::LogDecision::kNone;
  int64_t cost = 0;
  int upstream_status = 0;
};

}  // namespace tollgate::http
