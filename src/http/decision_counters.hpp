// A worker's decision counters (tollgate_decisions_total, tollgate_rejections_total,
// tollgate_requests_by_mode_total, tollgate_shadow_rejections_total), resolved once per plan,
// check and result of a policy: building the label strings for every request showed in profiles.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <absl/container/flat_hash_map.h>

#include <tollgate/core/decision.hpp>
#include <tollgate/metrics/metrics.hpp>
#include <tollgate/policy/policy.hpp>

namespace tollgate::http {

// What one check said of a request, as tollgate_decisions_total's `result` label names it.
enum class CheckResult { kAllowed, kRejected, kShadowRejected };

// Not thread-safe; owned by one worker. The counters it hands out are the registry's, which
// others read and add to.
//
// `generation` is the policy's that `plan` (and a check's name) belongs to: plans of a freed
// policy may leave their addresses to new ones. A newer generation than any before starts the
// table over (the entries of older ones are not looked up again, or only by requests that
// began before the reload).
class DecisionCounters {
 public:
  explicit DecisionCounters(metrics::Registry& registry) : registry_(registry) {}

  // tollgate_decisions_total{plan,check,result}. `check`: a plan limit's or a route limit's
  // name, as the policy holds it (its characters live as long as the generation).
  std::atomic<uint64_t>& Decision(uint64_t generation, const policy::Plan& plan,
                                  std::string_view check, CheckResult result) {
    return Find(
        CounterKey{generation, &plan, check.data(), static_cast<int>(result)},
        [&]() -> std::atomic<uint64_t>& {
          static constexpr const char* kResults[] = {"allowed", "rejected", "shadow_rejected"};
          return registry_.Counter(
              "tollgate_decisions_total",
              metrics::Label("plan", plan.name) + "," + metrics::Label("check", check) + "," +
                  metrics::Label("result", kResults[static_cast<int>(result)]));
        });
  }
  // tollgate_rejections_total{plan,code}.
  std::atomic<uint64_t>& Rejection(uint64_t generation, const policy::Plan& plan,
                                   core::RejectCode code) {
    return Find(CounterKey{generation, &plan, &kRejectionsTag, static_cast<int>(code)},
                [&]() -> std::atomic<uint64_t>& {
                  return registry_.Counter("tollgate_rejections_total",
                                           metrics::Label("plan", plan.name) + "," +
                                               metrics::Label("code", core::RejectCodeName(code)));
                });
  }
  // tollgate_requests_by_mode_total{plan,mode}: requests decided under enforcement or in
  // shadow mode (a key's own mode, its plan's cohort or mode).
  std::atomic<uint64_t>& Mode(uint64_t generation, const policy::Plan& plan, bool enforced) {
    return Find(CounterKey{generation, &plan, &kModeTag, enforced ? 1 : 0},
                [&]() -> std::atomic<uint64_t>& {
                  return registry_.Counter(
                      "tollgate_requests_by_mode_total",
                      metrics::Label("plan", plan.name) + "," +
                          metrics::Label("mode", enforced ? "enforce" : "shadow"));
                });
  }
  // tollgate_shadow_rejections_total{plan}.
  std::atomic<uint64_t>& ShadowRejection(uint64_t generation, const policy::Plan& plan) {
    return Find(CounterKey{generation, &plan, &kShadowTag, 0}, [&]() -> std::atomic<uint64_t>& {
      return registry_.Counter("tollgate_shadow_rejections_total",
                               metrics::Label("plan", plan.name));
    });
  }

  // The counters resolved so far (since the newest generation began).
  size_t size() const { return counters_.size(); }

 private:
  struct CounterKey {
    uint64_t generation;
    const void* plan;
    // The check's name (its characters live in the policy, as long as the generation), or a
    // tag of the plan-wide counters.
    const void* check;
    int result;
    bool operator==(const CounterKey&) const = default;
  };
  struct CounterKeyHash {
    size_t operator()(const CounterKey& k) const {
      // Mixed: the flat table takes its probe and its 7-bit tag from the low and high bits.
      uint64_t h =
          reinterpret_cast<uintptr_t>(k.plan) ^
          (reinterpret_cast<uintptr_t>(k.check) * 31 + static_cast<size_t>(k.result) * 7919) ^
          (k.generation << 40);
      h *= 0x9e3779b97f4a7c15ull;
      return h ^ (h >> 29);
    }
  };
  static constexpr char kRejectionsTag = 'r';
  static constexpr char kShadowTag = 's';
  static constexpr char kModeTag = 'm';

  // The counter of `key`, created by `create()` on first use.
  template <class Create>
  std::atomic<uint64_t>& Find(const CounterKey& key, Create create) {
    if (key.generation > generation_) {
      counters_.clear();
      generation_ = key.generation;
    }
    auto [it, inserted] = counters_.try_emplace(key, nullptr);
    if (inserted) it->second = &create();
    return *it->second;
  }

  metrics::Registry& registry_;
  uint64_t generation_ = 0;
  // Flat: looked up once per check and once more per decided request.
  absl::flat_hash_map<CounterKey, std::atomic<uint64_t>*, CounterKeyHash> counters_;
};

}  // namespace tollgate::http
