#include <tollgate/core/limit.hpp>

#include <cassert>
#include <limits>
#include <string>

namespace tollgate::core {
namespace {

constexpr std::string_view kAlgorithmNames[] = {"token_bucket", "sliding_window_log",
                                                "sliding_window_counter", "fixed_window", "quota"};

template <class T>
Result<Limit> Wrap(Result<T> r, auto make) {
  if (!r) return Error{r.error()};
  return make(std::move(r).value());
}

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

std::string_view RejectCodeName(RejectCode code) {
  switch (code) {
    case RejectCode::kNone:
      return "none";
    case RejectCode::kRateLimited:
      return "rate_limited";
    case RejectCode::kQuotaExceeded:
      return "quota_exceeded";
    case RejectCode::kCeilingExceeded:
      return "ceiling_exceeded";
    case RejectCode::kCostExceedsCapacity:
      return "cost_exceeds_capacity";
  }
  return "unknown";
}

Result<Algorithm> ParseAlgorithm(std::string_view name) {
  for (size_t i = 0; i < std::size(kAlgorithmNames); ++i) {
    if (name == kAlgorithmNames[i]) return static_cast<Algorithm>(i);
  }
  return Error{"algorithm: unknown '" + std::string(name) +
               "' (token_bucket, sliding_window_log, sliding_window_counter, fixed_window, "
               "quota)"};
}

std::string_view AlgorithmName(Algorithm algorithm) {
  return kAlgorithmNames[static_cast<size_t>(algorithm)];
}

Result<Limit> Limit::Create(const LimitSpec& s) {
  auto make = [](auto impl) { return Result<Limit>(Limit(std::move(impl))); };
  switch (s.algorithm) {
    case Algorithm::kTokenBucket: {
      if (s.lease < 0 || s.lease > s.capacity) return Error{"lease: must be 0 to the capacity"};
      if (s.lease > 0 && s.max_delay.micros() > 0) {
        return Error{"lease: does not apply with on_limit: delay"};
      }
      auto limit = Wrap(TokenBucket::Create(s.capacity, s.refill, s.max_delay), make);
      if (limit) limit->lease_ = s.lease;
      return limit;
    }
    case Algorithm::kSlidingWindowLog:
      return Wrap(SlidingLog::Create(s.limit, s.window), make);
    case Algorithm::kSlidingWindowCounter:
      return Wrap(SlidingCounter::Create(s.limit, s.window), make);
    case Algorithm::kFixedWindow:
      return Wrap(FixedWindow::Create(s.limit, s.window), make);
    case Algorithm::kQuota:
      return Wrap(Quota::Create(s.period, s.allowance, s.ceiling), make);
  }
  return Error{"algorithm: unknown"};
}

Decision Limit::Evaluate(State& state, int64_t cost, Instant now, bool may_delay) const {
  return std::visit(
      Overloaded{[&](const SlidingLog&) -> Decision {
                   assert(false && "a sliding log keeps a LogState");
                   return Decision{};
                 },
                 [&](const TokenBucket& b) { return b.Evaluate(state, cost, now, may_delay); },
                 [&](const auto& impl) { return impl.Evaluate(state, cost, now); }},
      impl_);
}

Decision Limit::Evaluate(LogState& state, int64_t cost, Instant now) const {
  assert(UsesLog());
  return std::get<SlidingLog>(impl_).Evaluate(state, cost, now);
}

Decision Limit::Peek(LogState& state, int64_t cost, Instant now) const {
  assert(UsesLog());
  return std::get<SlidingLog>(impl_).Peek(state, cost, now);
}

Instant Limit::ExpiresAt(const State& state) const {
  return std::visit(Overloaded{[&](const TokenBucket& b) { return b.FullAt(state); },
                               [&](const SlidingLog&) { return Instant(); },
                               [&](const auto& impl) { return impl.ExpiresAt(state); }},
                    impl_);
}

Instant Limit::ExpiresAt(const LogState& state) const {
  return std::get<SlidingLog>(impl_).EmptyAt(state);
}

int64_t Limit::PolicyQuota() const {
  return std::visit(Overloaded{[](const TokenBucket& b) { return b.capacity(); },
                               [](const auto& impl) { return impl.limit(); }},
                    impl_);
}

double Limit::SustainedPerSecond() const {
  return std::visit(Overloaded{[](const TokenBucket& b) {
                                 return static_cast<double>(b.rate().tokens) * 1e6 /
                                        static_cast<double>(b.rate().per_micros);
                               },
                               [](const Quota& q) {
                                 // Only a ceiling rejects; an allowance is counted, never enforced.
                                 if (!q.ceiling()) return std::numeric_limits<double>::infinity();
                                 const double seconds =
                                     q.period() == Period::kDay ? 86'400.0 : 31 * 86'400.0;
                                 return static_cast<double>(*q.ceiling()) / seconds;
                               },
                               [](const auto& impl) {
                                 return static_cast<double>(impl.limit()) * 1e6 /
                                        static_cast<double>(impl.window().micros());
                               }},
                    impl_);
}

int64_t Limit::PolicyWindowSeconds(Instant now) const {
  return std::visit(Overloaded{[](const TokenBucket& b) { return b.RefillSeconds(); },
                               [&](const Quota& q) { return PeriodSeconds(q.period(), now); },
                               [](const auto& impl) { return impl.window().CeilSeconds(); }},
                    impl_);
}

}  // namespace tollgate::core
