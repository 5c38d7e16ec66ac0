// Which endpoint of an upstream group takes a request, and which endpoints are out (issue 33):
// round robin or least outstanding requests among the admitted ones; passive health (ejection
// after consecutive failures, for a back-off that doubles up to a maximum, then admitted again)
// and the verdicts of active health checks. Pure: no I/O, time passed in.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include <tollgate/config/config.hpp>

namespace tollgate::http {

// Thread-safe (atomics only): every worker picks from and reports to its group's one balancer,
// so an endpoint's failures count across the process and an ejection holds for every worker.
// Times are monotonic milliseconds (any epoch, but not 0: 0 means "never").
class Balancer {
 public:
  static constexpr size_t kMaxEndpoints = 64;  // config: at most 64 endpoints per group
  using Tried = uint64_t;                      // bit i: endpoint i was tried already

  // REQUIRES: 1 <= endpoints <= kMaxEndpoints.
  Balancer(config::Balance balance, config::PassiveHealthConfig passive, size_t endpoints);

  size_t size() const { return size_; }

  // An admitted endpoint that is not in `tried`, by the group's balance: the next in turn
  // (round robin), or the one with the fewest outstanding requests, ties taken in turn
  // (least outstanding); nullopt when every endpoint is out or tried.
  std::optional<size_t> Pick(int64_t now_ms, Tried tried = 0);

  // A request to endpoint `i` began or ended (its outstanding count; Begin counts requests).
  void Begin(size_t i);
  void End(size_t i);

  // How a try on endpoint `i` ended: `ok`, an answer below 500; else a connect failure, a
  // timeout, a broken answer or a 5xx. True when this failure ejected the endpoint.
  bool Report(size_t i, bool ok, int64_t now_ms);
  // An active health check's verdict; true when it took the endpoint out.
  bool ReportCheck(size_t i, bool healthy, int unhealthy_threshold, int healthy_threshold);

  bool Admitted(size_t i, int64_t now_ms) const;
  // How long until some endpoint is admitted again: 0 when one is; an endpoint out by its
  // health checks counts as `check_interval_ms` away.
  int64_t MsUntilAdmission(int64_t now_ms, int64_t check_interval_ms) const;

  struct View {
    bool admitted = true;
    bool check_healthy = true;   // by the active health checks
    int64_t ejected_for_ms = 0;  // left of a passive ejection
    uint64_t ejections = 0;      // passive ejections and active take-outs
    int64_t outstanding = 0;
    uint64_t requests = 0;
    uint32_t consecutive_failures = 0;
  };
  View Read(size_t i, int64_t now_ms) const;

  // Endpoint i's outstanding count for as long as it lives (Begin, then End).
  class Lease {
   public:
    Lease() = default;
    Lease(Balancer& b, size_t i) : b_(&b), i_(i) { b.Begin(i); }
    Lease(Lease&& o) noexcept : b_(o.b_), i_(o.i_) { o.b_ = nullptr; }
    Lease& operator=(Lease&& o) noexcept {
      if (this != &o) {
        Reset();
        b_ = o.b_;
        i_ = o.i_;
        o.b_ = nullptr;
      }
      return *this;
    }
    ~Lease() { Reset(); }
    void Reset() {
      if (b_) b_->End(i_);
      b_ = nullptr;
    }

   private:
    Balancer* b_ = nullptr;
    size_t i_ = 0;
  };

 private:
  struct alignas(64) Endpoint {  // one cache line each: the threads of two endpoints apart
    std::atomic<int64_t> ejected_until_ms{0};  // 0: never ejected
    std::atomic<uint32_t> failures{0};         // consecutive
    std::atomic<uint32_t> level{0};            // ejections since the back-off last reset
    std::atomic<bool> check_healthy{true};
    std::atomic<uint32_t> check_streak{0};  // checks in a row against the current verdict
    std::atomic<int64_t> outstanding{0};
    std::atomic<uint64_t> requests{0};
    std::atomic<uint64_t> ejections{0};
  };
  const config::Balance balance_;
  const config::PassiveHealthConfig passive_;
  const size_t size_;
  std::unique_ptr<Endpoint[]> endpoints_;
  std::atomic<uint64_t> turn_{0};
};

}  // namespace tollgate::http
