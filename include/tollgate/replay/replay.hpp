// tollgate replay: a candidate configuration run over a recorded access log, on a virtual clock
// taken from the log's timestamps, with the real engine on a MemoryStore (docs/operations.md,
// "Replay"; issue 23).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <tollgate/policy/policy.hpp>
#include <tollgate/util/clock.hpp>

namespace tollgate::replay {

// The time of the line being replayed. Thread-safe. It never goes back: a line stamped before
// the one read last is decided at the later time (lines are written when their request ends, so
// requests on different connections can be logged slightly out of order).
class VirtualClock final : public util::Clock {
 public:
  core::Instant Now() const override { return core::Instant::FromUnixMicros(us_.load()); }
  int64_t SteadyMicros() const override { return us_.load(); }
  // Moves to `t` when it is later than now. Returns false (and stays) when it is earlier.
  bool AdvanceTo(core::Instant t);

 private:
  std::atomic<int64_t> us_{0};
};

// The counts of one group of lines (all of them, a plan, a route or a key).
struct Counts {
  uint64_t requests = 0;
  uint64_t rejected = 0;         // the candidate rejects (an enforced limit, or invalid-key limit)
  uint64_t shadow_rejected = 0;  // only a shadow limit would reject: counted, not rejected
  uint64_t newly_rejected = 0;   // the candidate would reject; the log recorded no rejection
  uint64_t newly_admitted = 0;   // the log recorded a rejection; the candidate would not
  uint64_t first_rejection_line = 0;  // 0: none
  std::string first_rejection_ts;     // as the line's `ts`
  // Rejected or shadow-rejected: what the candidate's limits would reject once enforced.
  uint64_t WouldReject() const { return rejected + shadow_rejected; }
  // WouldReject() / requests; 0 when there are no requests.
  double Share() const;
};

struct Malformed {
  uint64_t line;  // 1-based
  std::string reason;
};

struct Group {
  std::string name;
  Counts counts;
};

// What a replay found. Thread-compatible (a value).
struct Report {
  uint64_t lines = 0;                      // lines read (malformed included)
  uint64_t malformed = 0;                  // lines not parsed: never replayed
  std::vector<Malformed> first_malformed;  // the first few (Options::malformed_listed)
  Counts total;                            // every well-formed line
  // Outcomes besides allowed and rejected, all included in total.requests:
  uint64_t not_routed = 0;        // answered before routing (built-in endpoints, refusals)
  uint64_t unlimited = 0;         // no limit of the candidate applies, or it consumes nothing
  uint64_t invalid_key = 0;       // 401: no key, or one the candidate does not know
  uint64_t blocked = 0;           // the candidate's deny list refuses it (403)
  uint64_t invalid_cost = 0;      // 400: the candidate's route cannot read the cost
  uint64_t unknown_identity = 0;  // the candidate limits it by key; the log has none to use
  uint64_t clock_held = 0;        // decided before a line decided already (a request longer
                                  // than Options::reorder_window): decided at that line's time
  std::vector<Group> plans;       // by the candidate's plan; by name
  std::vector<Group> routes;      // by the candidate's route label; by name
  std::vector<Group> top_keys;    // most would-be rejections first, then most requests
};

struct Options {
  size_t top_keys = 20;          // Report::top_keys' length at most
  size_t malformed_listed = 10;  // Report::first_malformed's length at most
  // Lines are decided in the order the gateway decided them (`decided_us`, or `ts` less the
  // latency), not in file order (when they finished): a line is held until a line that
  // finished this long after its decision has been read, so requests shorter than this are
  // put in order exactly; a longer one is decided at the time reached (Report::clock_held).
  // Memory: the lines of this long. Default 60 s.
  core::Duration reorder_window = core::Duration::Seconds(60);
};

// Replays lines one at a time. Not thread-safe; one per replay.
class Replayer {
 public:
  // REQUIRES: candidate not null.
  Replayer(std::shared_ptr<const policy::Policy> candidate, Options options = {});
  ~Replayer();
  Replayer(const Replayer&) = delete;
  Replayer& operator=(const Replayer&) = delete;

  // One line of the log, without its newline.
  void Feed(std::string_view line);
  // One line that could not be read whole (longer than the parser's limit).
  void FeedMalformed(const char* reason);
  // Reads `fd` to its end, line by line. Returns false (and the error) on a read error.
  bool FeedFile(int fd, std::string& error);
  // Decides the lines still held, then returns the report (sorted; top keys cut to
  // Options::top_keys).
  Report Finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

enum class Format { kTable, kJson, kCsv };

// The report as a human table, JSON or CSV. `max_share`: the gate's threshold, shown with
// whether the total would-be rejection share exceeds it.
std::string Render(const Report& report, Format format, std::optional<double> max_share);

// Whether the total would-be rejection share exceeds `max_share` (never for an empty log).
bool ExceedsShare(const Report& report, double max_share);

}  // namespace tollgate::replay
