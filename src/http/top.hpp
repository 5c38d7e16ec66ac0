// Top offenders (GET /admin/top): per worker, per minute, Space-Saving sketches of admitted and
// rejected requests by key and by client address. No metric series per key.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string_view>

#include <tollgate/metrics/space_saving.hpp>

namespace tollgate::http {

class TopOffenders {
 public:
  static constexpr size_t kCapacity = 128;  // counters per sketch: error <= total / 128
  static constexpr int64_t kMinutes = 5;    // the longest window

  enum Sketch { kAdmittedKeys, kRejectedKeys, kAdmittedAddresses, kRejectedAddresses };

  // One decided request at `now_s` (Unix seconds). Thread-safe.
  void Record(bool rejected, std::string_view key_id, std::string_view address, int64_t now_s) {
    std::lock_guard lock(mu_);
    Minute& m = At(now_s / 60);
    if (!key_id.empty()) m.sketches[rejected ? kRejectedKeys : kAdmittedKeys].Add(key_id);
    if (!address.empty())
      m.sketches[rejected ? kRejectedAddresses : kAdmittedAddresses].Add(address);
  }

  // Adds this worker's `sketch` of the minutes that overlap the last `window_s` seconds to `out`.
  void MergeInto(Sketch sketch, int64_t window_s, int64_t now_s, metrics::SpaceSaving& out) {
    std::lock_guard lock(mu_);
    const int64_t last = now_s / 60, first = (now_s - window_s + 1) / 60;
    for (int64_t minute = std::max(first, last - kMinutes + 1); minute <= last; ++minute) {
      const Minute& m = minutes_[static_cast<size_t>(minute % kMinutes)];
      if (m.index == minute) out.Merge(m.sketches[sketch]);
    }
  }

 private:
  struct Minute {
    int64_t index = -1;
    std::array<metrics::SpaceSaving, 4> sketches{
        metrics::SpaceSaving(kCapacity), metrics::SpaceSaving(kCapacity),
        metrics::SpaceSaving(kCapacity), metrics::SpaceSaving(kCapacity)};
  };
  Minute& At(int64_t minute) {
    Minute& m = minutes_[static_cast<size_t>(minute % kMinutes)];
    if (m.index != minute) {
      for (auto& s : m.sketches) s.Clear();
      m.index = minute;
    }
    return m;
  }

  std::mutex mu_;
  std::array<Minute, kMinutes> minutes_;
};

// The sketch `sketch` of every worker (each `w->top`) over the last `window_s` seconds, merged:
// GET /admin/top and the live page.
template <class Workers>
metrics::SpaceSaving MergeTop(const Workers& workers, TopOffenders::Sketch sketch, int64_t window_s,
                              int64_t now_s) {
  metrics::SpaceSaving merged(TopOffenders::kCapacity);
  for (auto& w : workers) w->top.MergeInto(sketch, window_s, now_s, merged);
  return merged;
}

}  // namespace tollgate::http
