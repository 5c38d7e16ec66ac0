// The snapshot file of the Postgres key source: the last good api_keys rows, to start from when
// PostgreSQL is down. {"version":1,"written_at_unix_s":...,"keys":[{...}, ...]}, one row per
// line; key digests, never keys.
#pragma once

#include <cstdint>
#include <string>
#include <tollgate/core/result.hpp>
#include <vector>

#include "policy/postgres/key_record.hpp"

namespace tollgate::policy::internal {

// The file's text for `records`, in their order.
std::string SnapshotText(const std::vector<KeyRecord>& records, int64_t written_at_unix_s);

// The rows of the snapshot file at `path` (unchecked: CheckRow follows), or an error that
// completes the sentence "..., and <error>" ("there is no snapshot file at '...'").
core::Result<std::vector<KeyRecord>> ReadSnapshotFile(const std::string& path);

// Writes `text` to `path` (mode 0600) through a temporary file and a rename, both synced:
// readers see the old file or the new one, never half of one. Returns "" or what failed.
std::string WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace tollgate::policy::internal
