// Where keys come from when not from the configuration file (keys.source): the interface the
// gateway is handed (issue 32, part 2). The PostgreSQL source (postgres_keys.hpp) implements
// it; the composition root (app/) builds it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <tollgate/config/config.hpp>

namespace tollgate::metrics {
class Registry;
}

namespace tollgate::policy {

// What a key source did. Thread-safe: read from any thread.
struct KeySnapshotStats {
  std::atomic<uint64_t> loads{0};          // full loads from PostgreSQL (start, timer, reconnect)
  std::atomic<uint64_t> notifications{0};  // NOTIFY messages received
  // Failed connection attempts, lost connections, failed or timed-out queries, snapshot file
  // writes that failed.
  std::atomic<uint64_t> errors{0};
  // Malformed rows, each logged with its key id: counted once per version of the row (a full
  // resync does not count an unchanged row again; a restart does).
  std::atomic<uint64_t> skipped_rows{0};
  std::atomic<uint64_t> reconnects{0};           // connections made again after a loss
  std::atomic<bool> using_snapshot_file{false};  // keys from the file; PostgreSQL not reached yet
  std::atomic<bool> connected{false};
};

// Thread-safe.
class KeySource {
 public:
  // Called on the source's thread with the full key list after it changed. Not called for the
  // list the source started with (read it with Keys()).
  using ChangeCallback = std::function<void(std::vector<config::KeyConfig> keys)>;
  // One JSON object per line, without the newline ({"level":"error","msg":...}); null: stderr.
  using LogCallback = std::function<void(const std::string& json_line)>;

  virtual ~KeySource() = default;
  // The current snapshot, ordered by key id.
  virtual std::vector<config::KeyConfig> Keys() const = 0;
  // New plans after a configuration reload: the keys are checked again and the change callback
  // follows. REQUIRES: at least one plan.
  virtual void SetPlans(std::vector<config::PlanConfig> plans) = 0;
  virtual const KeySnapshotStats& stats() const = 0;
  virtual void ExportMetrics(metrics::Registry& registry) const = 0;
};

}  // namespace tollgate::policy
