// Waiting for a condition in tests that run real servers or threads: poll it, bounded in time,
// instead of sleeping a fixed time and hoping it held by then.
#pragma once

#include <chrono>
#include <thread>

namespace tollgate::testing {

// How long WaitUntil() waits by default: generous, since a loaded or sanitized build is slow,
// and a wait that succeeds returns as soon as the condition holds.
inline constexpr std::chrono::milliseconds kDefaultWait{5000};

// Calls `predicate` (a `bool()` callable) until it returns true or `timeout` has passed,
// sleeping `step` between calls; returns whether it became true (it is asked once more at the
// deadline, so a condition that holds then counts). Thread-safe if `predicate` is.
template <typename Predicate>
bool WaitUntil(Predicate&& predicate, std::chrono::milliseconds timeout = kDefaultWait,
               std::chrono::milliseconds step = std::chrono::milliseconds(2)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(step);
  }
  return static_cast<bool>(predicate());
}

}  // namespace tollgate::testing
