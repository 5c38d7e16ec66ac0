// The policy in force and its generation (issue 32, part 2): built from a configuration and
// swapped in whole, so that a reader keeps the policy it took for as long as it needs it. The
// composition root (app/) owns it and hands it to the gateway and the RLS server.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include <tollgate/config/config.hpp>
#include <tollgate/core/result.hpp>
#include <tollgate/policy/policy.hpp>

namespace tollgate::policy {

// Thread-safe: installs are serialized among themselves; readers never wait for a build.
class PolicyHolder {
 public:
  // Told the keys whose plan does not exist (they get the strictest plan) when their number
  // changed at an install and is not zero: how many, and the first of them (valid during the
  // call only).
  using UnknownPlansFn = std::function<void(size_t keys, const config::KeyConfig& first)>;

  PolicyHolder() = default;
  PolicyHolder(const PolicyHolder&) = delete;
  PolicyHolder& operator=(const PolicyHolder&) = delete;

  // Builds the policy of `config` and swaps it in, then moves the generation on and counts the
  // keys of unknown plans (calling `note`, when set, as UnknownPlansFn says). On error (the
  // message names the field) the policy in force keeps serving and nothing changes.
  core::Result<bool> Install(config::Config config, const UnknownPlansFn& note = {});

  // The policy in force; null before the first successful Install().
  std::shared_ptr<const Policy> Current() const;

  // 0 before the first install, then one more after each, stored (release) once Current()
  // returns the new policy: a reader that keeps a copy of Current() takes it again when this
  // moved on (acquire), so the hot path costs one atomic load.
  const std::atomic<uint64_t>& generation() const { return generation_; }

  // The keys of the last installed policy whose plan does not exist (tollgate_keys_unknown_plan).
  const std::atomic<size_t>& unknown_plan_keys() const { return unknown_plan_keys_; }

 private:
  std::mutex install_mu_;  // one Install() at a time: the count follows the policy in force
  mutable std::mutex mu_;  // policy_
  std::shared_ptr<const Policy> policy_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<size_t> unknown_plan_keys_{0};
};

}  // namespace tollgate::policy
