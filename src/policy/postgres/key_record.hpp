// One row of `api_keys` as read, and the pure checks that turn it into a key: the same for a row
// from PostgreSQL and for one from the snapshot file. No libpq here.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <optional>
#include <string>
#include <tollgate/config/config.hpp>
#include <vector>

namespace tollgate::policy::internal {

// One api_keys row as read (or as kept in the snapshot file), before it is checked. Text, as
// PostgreSQL's text format gives it: the checks are the same whatever the origin.
struct KeyRecord {
  std::string key_sha256;
  std::string key_id;
  std::string account_id;
  std::string plan;
  std::string rate_limit_per_minute;
  std::string rate_limit_burst;
  std::string overrides;  // JSON text; empty: NULL
  std::string mode;       // enforce | shadow; empty: NULL (the plan's mode or cohort)
  bool operator==(const KeyRecord&) const = default;
};

// What was wrong with a row, and what was done about it ("row skipped", "key loaded without its
// overrides", ...): one log line each.
struct RowProblem {
  std::string error;
  std::string action;
};

// The key a row stands for, checked against `plans`, with what was wrong with it appended to
// `problems`. nullopt: the row cannot be used (no key id, no valid digest, control characters).
// An unknown plan keeps the key without per-key values; bad per-key columns or overrides drop
// only those.
std::optional<config::KeyConfig> CheckRow(const KeyRecord& r,
                                          const std::vector<config::PlanConfig>& plans,
                                          std::vector<RowProblem>& problems);

// `json` in one spelling (boost::json's, without spaces), so that jsonb's {"a": 1} and the
// snapshot file's {"a":1} compare equal; text that is not JSON is returned unchanged.
std::string CompactJson(const std::string& json);

// The row as a JSON object of the snapshot file: numbers as numbers when they are, overrides
// as JSON when they parse; anything else kept as text, to be refused again when read back.
boost::json::object RecordJson(const KeyRecord& r);

// The row of a snapshot file entry. A value that is not an object gives an empty row (no key
// id: refused by CheckRow, logged and counted).
KeyRecord RecordFromJson(const boost::json::value& v);

}  // namespace tollgate::policy::internal
