// Token leasing: a replica takes N tokens of a hot key's bucket from the shared store in one call
// and spends them locally, so that a hot key costs the store one call per N requests.
//
// Opt-in per limit (`lease: N` on a token bucket; core::LimitSpec::lease). A batch is leased when
// it is one such check, consumed (not peeked), at a cost of at most N. Otherwise, and while the
// store recently could not grant N, the batch goes to the store as it is (exact). Requests that
// come while a grant is in flight wait for it.
//
// The bound (docs/operations.md, "Token leasing"): tokens a replica holds were taken from the
// store, so what all replicas admit is what the exact bucket admits, except that tokens taken
// before an interval may be spent in it: in any interval, at most replicas x N beyond the exact
// budget. Unspent tokens go back (give_back) when the lease expires (`ttl` after it was granted);
// a lease taken before the last one is spent adds to what is left of it. Given back to a bucket
// that refilled meanwhile, tokens are capped at its capacity, never credited beyond it. The other
// side: while a replica holds tokens, another may find the bucket short and answer 429 with up to
// (replicas - 1) x N tokens unspent elsewhere, for at most `ttl`.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <tollgate/core/time.hpp>
#include <tollgate/store/store.hpp>
#include <tollgate/util/clock.hpp>

namespace tollgate::metrics {
class Registry;
}

namespace tollgate::store {

// Unspent tokens of an ended lease, to give back to the bucket `name` of `scope`. `unit` and
// `rate`: the bucket's units per token and refill units per microsecond (core::Rate).
struct Unspent {
  std::string scope, name;
  int64_t tokens = 0;
  int64_t unit = 1;
  int64_t rate = 1;
};

struct LeasingStats {
  std::atomic<uint64_t> local{0};       // requests answered from a lease, without the store
  std::atomic<uint64_t> grants{0};      // leases taken from the store
  std::atomic<uint64_t> refused{0};     // lease requests the store could not grant in full
  std::atomic<uint64_t> exact{0};       // leasable requests sent to the store as they were
  std::atomic<uint64_t> waited{0};      // requests that waited for a grant in flight
  std::atomic<uint64_t> given_back{0};  // tokens given back
};

// Thread-safe, as every Store. `inner` outlives it; `give_back` is called on the caller's thread
// of Apply() or Sweep().
class LeasingStore final : public Store {
 public:
  struct Options {
    core::Duration ttl = core::Duration::Seconds(1);  // a lease's life from its grant
  };
  LeasingStore(Store& inner, std::function<void(const Unspent&)> give_back, Options options,
               const util::Clock& clock = util::SystemClock::Instance());
  ~LeasingStore() override;

  void Apply(const Batch& batch, std::span<core::Decision> decisions, Completion done) override;
  std::string_view Name() const override { return inner_.Name(); }

  // Ends the leases past their ttl, giving their unspent tokens back (every 100 ms or so).
  void Sweep();
  // Drops every lease without giving its tokens back: the store's counters were reset (POST
  // /admin/reset), so the tokens taken before are no one's.
  void Forget();

  const LeasingStats& stats() const { return stats_; }
  void ExportMetrics(metrics::Registry& registry) const;

 private:
  struct Lease {
    int64_t tokens = 0;            // left to spend
    int64_t store_remaining = 0;   // the store's remaining after the grant (for the headers)
    core::Decision granted;        // the grant's decision (limit, reset)
    int64_t expires_us = 0;        // steady clock
    int64_t refused_until_us = 0;  // the store could not grant N: exact until then
    bool granting = false;         // a grant is in flight
    Unspent unspent;               // where the tokens go back
    // Requests that came while the grant was in flight: answered from it, or sent on as they
    // are when it does not cover them.
    struct Waiting {
      Batch batch;
      std::span<core::Decision> decisions;
      Completion done;
    };
    std::vector<Waiting> waiting;
  };
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, Lease> leases;
  };
  static constexpr size_t kShards = 16;

  // The check of `batch` if it may be leased, else null.
  static const Check* Leasable(const Batch& batch);
  Shard& ShardOf(std::string_view key);
  // Asks the store for a lease of `check`'s N tokens; answers the request from it, or from the
  // exact batch when the store cannot grant N.
  void Grant(const Batch& batch, const Check& check, std::string key,
             std::span<core::Decision> decisions, Completion done);
  // The lease's own batch (the check at a cost of N), alive until the store answers.
  struct GrantCall {
    Check check;
    Batch batch;
    core::Decision decision;
  };
  // The store's answer to a grant: the lease updated, `first` and the requests that waited
  // answered from it, or sent on as they are.
  void Granted(const GrantCall& call, const std::string& key, Lease::Waiting first,
               const ApplyResult& r);
  // Counts `unspent` and hands each to give_back_. REQUIRES: no shard lock held.
  void GiveBack(std::span<const Unspent> unspent);
  // Spends `batch`'s cost from `lease` into `decisions[0]`. REQUIRES: enough tokens.
  static void Spend(Lease& lease, const Batch& batch, std::span<core::Decision> decisions);

  Store& inner_;
  std::function<void(const Unspent&)> give_back_;
  const Options options_;
  const util::Clock& clock_;
  std::array<Shard, kShards> shards_;
  LeasingStats stats_;
};

}  // namespace tollgate::store
