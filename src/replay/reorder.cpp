#include "replay/reorder.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

namespace tollgate::replay {

void ReorderBuffer::Push(const LogLine& parsed, uint64_t number, std::string_view text) {
  Line line{parsed.DecidedMicros(),
            number,
            std::make_unique_for_overwrite<char[]>(text.size()),
            text.size(),
            {},
            false};
  std::memcpy(line.text.get(), text.data(), text.size());
  // The parse is kept (its strings moved into the copy): parsing twice was a third of the time.
  line.parsed = MoveViews(parsed, text, line.text.get(), line.line);
  const int64_t decided_us = line.decided_us;
  size_t at = sorted_.size();
  for (size_t scanned = 0; at > 0 && sorted_[at - 1].decided_us > decided_us; --at, ++scanned) {
    if (scanned == kScan) {
      late_.push_back(std::move(line));
      std::push_heap(late_.begin(), late_.end(), Later);
      return;
    }
  }
  if (at == sorted_.size()) {
    sorted_.push_back(std::move(line));
  } else {
    sorted_.insert(sorted_.begin() + static_cast<std::ptrdiff_t>(at), std::move(line));
  }
}

ReorderBuffer::Line ReorderBuffer::PopSorted() {
  Line line = std::move(sorted_.front());
  sorted_.pop_front();
  return line;
}

ReorderBuffer::Line ReorderBuffer::PopLate() {
  std::pop_heap(late_.begin(), late_.end(), Later);
  Line line = std::move(late_.back());
  late_.pop_back();
  return line;
}

}  // namespace tollgate::replay
