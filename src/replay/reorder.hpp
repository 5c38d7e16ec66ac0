// Lines of an access log put back in the order they were decided (issue 31): the gateway writes
// a line when its request finishes, so a long request decided first comes after shorter ones
// decided later. A pure, in-memory buffer; replay.cpp decides what it releases.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string_view>
#include <vector>

#include "replay/log_line.hpp"

namespace tollgate::replay {

// Not thread-safe; one per replay.
class ReorderBuffer {
 public:
  struct Line {
    int64_t decided_us;  // the order: earliest first, then
    uint64_t number;     // the order of Push (the line's number in the file)
    std::unique_ptr<char[]> text;
    size_t size;
    // Parsed, its strings in `text`; `parsed` false when they could not be kept (escapes were
    // decoded into the parser's scratch): parse `text` again.
    LogLine line;
    bool parsed;
    std::string_view Text() const { return {text.get(), size}; }
  };

  // Holds a copy of `text` and of `parsed` (its parse, valid until the next parse). REQUIRES:
  // `number` larger than every earlier one.
  void Push(const LogLine& parsed, uint64_t number, std::string_view text);

  // Hands the held lines decided at or before `until_us` to `release`, earliest first (ties in
  // the order of Push), and forgets them.
  template <class Fn>
  void Release(int64_t until_us, Fn&& release) {
    for (;;) {
      const bool from_sorted =
          !sorted_.empty() && (late_.empty() || !Later(sorted_.front(), late_.front()));
      if (!from_sorted && late_.empty()) return;
      const Line& next = from_sorted ? sorted_.front() : late_.front();
      if (next.decided_us > until_us) return;
      const Line line = from_sorted ? PopSorted() : PopLate();
      release(line);
    }
  }

  size_t size() const { return sorted_.size() + late_.size(); }

 private:
  static bool Later(const Line& a, const Line& b) {
    return a.decided_us != b.decided_us ? a.decided_us > b.decided_us : a.number > b.number;
  }
  Line PopSorted();
  Line PopLate();

  // Most lines come in order, or a few lines out of it (latencies differ by milliseconds): they
  // are inserted in place, a short scan from the back. A line further out of order (a long
  // request) goes to a heap of its own, so that no insertion moves more than kScan lines.
  static constexpr size_t kScan = 64;
  std::deque<Line> sorted_;  // in order
  std::vector<Line> late_;   // a min-heap (Later)
};

}  // namespace tollgate::replay
