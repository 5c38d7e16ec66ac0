// The stored state of one check of one identity.
#pragma once

#include <cstdint>

namespace tollgate::core {

// 16 bytes that every fixed-size algorithm interprets in its own way. An all-zero State means
// "no history": a full bucket, an empty window, nothing used this period. Stores keep it
// opaque. Thread-compatible (a value type).
struct State {
  int64_t a = 0;
  int64_t b = 0;
  bool operator==(const State&) const = default;
};

}  // namespace tollgate::core
