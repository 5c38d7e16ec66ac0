// Limits for tests, built the way a config would build them.
#pragma once

#include <cstdint>

#include <tollgate/core/limit.hpp>
#include <tollgate/core/rate.hpp>

namespace tollgate::testing {

// A token bucket of `capacity` tokens refilled at `refill_per_second` ("5", "0.5", "0.001").
// REQUIRES: capacity > 0 and a rate Rate::Parse accepts (the test's own constants).
inline core::Limit Bucket(int64_t capacity, const char* refill_per_second) {
  return core::Limit::Create({.algorithm = core::Algorithm::kTokenBucket,
                              .capacity = capacity,
                              .refill = core::Rate::Parse(refill_per_second, 1).value()})
      .value();
}

}  // namespace tollgate::testing
