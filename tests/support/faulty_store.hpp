// A Store decorator that injects faults (STYLE.md, "Tests": leveldb's SpecialEnv, Beast's
// fail_count): it forwards every call to an inner store, except the ones it was told to fail or
// to stall.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <tollgate/store/store.hpp>

namespace tollgate::testing {

// Thread-safe: Apply() may be called from any thread, as on any Store, and the controls from
// the test's. Calls are numbered from 0 in the order Apply() is entered.
//
//   FaultyStore faulty(memory);
//   faulty.FailCall(1, StoreErrc::kTimeout);  // the second call from now fails
//   faulty.StallCall(0);                      // the next call is held until Release()
class FaultyStore final : public store::Store {
 public:
  // `inner` outlives this store.
  explicit FaultyStore(store::Store& inner) : inner_(inner) {}

  // The `n`th call from now (0: the next one) fails with `error`, without reaching the inner
  // store: its decisions are left as they were, and nothing is consumed.
  void FailCall(uint64_t n, store::StoreErrc error = store::StoreErrc::kUnavailable) {
    std::lock_guard lock(mu_);
    faults_[calls_ + n] = Fault{error};
  }

  // Every call fails with `error` from now on (nullopt: no more); FailCall()s still apply.
  void FailAll(std::optional<store::StoreErrc> error) {
    std::lock_guard lock(mu_);
    fail_all_ = error;
  }

  // The `n`th call from now goes to the inner store, which decides (and consumes) as usual, but
  // its completion is held until Release(): a store that is slow to answer.
  void StallCall(uint64_t n) {
    std::lock_guard lock(mu_);
    faults_[calls_ + n] = Fault{std::nullopt};
  }

  // Lets every call stalled so far complete, oldest first, on this thread (a call whose inner
  // store has not answered yet completes when it does). Returns how many were released.
  int Release() {
    std::vector<std::shared_ptr<Held>> released;
    {
      std::lock_guard lock(mu_);
      released.swap(held_);
    }
    for (auto& h : released) h->Release();
    return static_cast<int>(released.size());
  }

  // Calls entered so far, and calls stalled and not released yet.
  uint64_t calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  int stalled() const {
    std::lock_guard lock(mu_);
    return static_cast<int>(held_.size());
  }

  void Apply(const store::Batch& batch, std::span<core::Decision> decisions,
             Completion done) override {
    std::optional<Fault> fault;
    std::shared_ptr<Held> held;
    {
      std::lock_guard lock(mu_);
      const uint64_t call = calls_++;
      if (auto it = faults_.find(call); it != faults_.end()) {
        fault = it->second;
        faults_.erase(it);
      } else if (fail_all_) {
        fault = Fault{fail_all_};
      }
      if (fault && !fault->error) {
        held = std::make_shared<Held>(std::move(done));
        held_.push_back(held);
      }
    }
    if (held) {
      return inner_.Apply(batch, decisions,
                          [held](store::ApplyResult&& r) { held->Answer(std::move(r)); });
    }
    if (fault) {
      return done(store::ApplyResult{.error = *fault->error, .message = "injected fault"});
    }
    inner_.Apply(batch, decisions, std::move(done));
  }

  std::string_view Name() const override { return "faulty"; }

 private:
  struct Fault {
    std::optional<store::StoreErrc> error;  // nullopt: stall
  };

  // A stalled call: completes once the inner store has answered and the test has released it,
  // in whichever order those happen.
  class Held {
   public:
    explicit Held(Completion done) : done_(std::move(done)) {}
    void Answer(store::ApplyResult&& r) {
      std::unique_lock lock(mu_);
      result_ = std::move(r);
      if (released_) Complete(lock);
    }
    void Release() {
      std::unique_lock lock(mu_);
      released_ = true;
      if (result_) Complete(lock);
    }

   private:
    void Complete(std::unique_lock<std::mutex>& lock) {
      store::ApplyResult r = std::move(*result_);
      Completion done = std::move(done_);
      lock.unlock();
      done(std::move(r));
    }

    std::mutex mu_;
    Completion done_;
    std::optional<store::ApplyResult> result_;
    bool released_ = false;
  };

  store::Store& inner_;
  mutable std::mutex mu_;
  uint64_t calls_ = 0;
  std::map<uint64_t, Fault> faults_;
  std::optional<store::StoreErrc> fail_all_;
  std::vector<std::shared_ptr<Held>> held_;
};

}  // namespace tollgate::testing
