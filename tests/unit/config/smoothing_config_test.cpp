// `on_limit: delay` and `max_delay_ms` (issue 20): given together, on token buckets, refused
// otherwise naming the field.
#include <string>

#include <gtest/gtest.h>
#include <tollgate/config/config.hpp>

namespace tollgate::config {
namespace {

std::string ErrorOf(const std::string& limit) {
  auto c = ParseConfig("plans:\n  p:\n    limits:\n      - " + limit + "\n");
  return c.ok() ? "" : c.error();
}

TEST(SmoothingConfig, DelayNeedsABucketAndABound) {
  auto ok = ParseConfig(
      "plans:\n  p:\n    limits:\n"
      "      - {name: b, capacity: 5, refill_per_second: 10, on_limit: delay, max_delay_ms: 250}\n"
      "      - {name: r, capacity: 5, refill_per_second: 10, on_limit: reject}\n");
  ASSERT_TRUE(ok.ok()) << ok.error();
  EXPECT_EQ(ok->plans[0].limits[0].spec.max_delay, core::Duration::Millis(250));
  EXPECT_EQ(ok->plans[0].limits[1].spec.max_delay, core::Duration());

  struct Case {
    const char* limit;
    const char* error;
  };
  const Case cases[] = {
      {"{name: b, capacity: 5, refill_per_second: 10, max_delay_ms: 250}",
       "plans.p.limits[0].max_delay_ms: needs on_limit: delay"},
      {"{name: b, capacity: 5, refill_per_second: 10, on_limit: reject, max_delay_ms: 250}",
       "plans.p.limits[0].max_delay_ms: needs on_limit: delay"},
      {"{name: b, capacity: 5, refill_per_second: 10, on_limit: delay}",
       "plans.p.limits[0].max_delay_ms: required with on_limit: delay"},
      {"{name: b, capacity: 5, refill_per_second: 10, on_limit: wait, max_delay_ms: 5}",
       "plans.p.limits[0].on_limit: must be reject or delay, got 'wait'"},
      {"{name: w, algorithm: fixed_window, limit: 5, window_seconds: 1, on_limit: delay, "
       "max_delay_ms: 5}",
       "plans.p.limits[0].on_limit: delay needs algorithm token_bucket"},
      {"{name: b, capacity: 5, refill_per_second: 10, on_limit: delay, max_delay_ms: 0}",
       "plans.p.limits[0].max_delay_ms"},
      {"{name: b, capacity: 5, refill_per_second: 10, on_limit: delay, max_delay_ms: 60001}",
       "plans.p.limits[0].max_delay_ms"},
      {"{name: b, capacity: 5, refill_per_second: 10, on_limit: delay, max_delay_ms: soon}",
       "plans.p.limits[0].max_delay_ms"},
  };
  for (const Case& c : cases) {
    const std::string error = ErrorOf(c.limit);
    EXPECT_EQ(error.rfind(c.error, 0), 0u) << c.limit << "\n  got: " << error;
  }
}

TEST(SmoothingConfig, HeldRequestBoundsAreServerSettings) {
  auto c = ParseConfig(
      "server: {max_held_requests: 7, max_held_per_identity: 2}\nplans:\n  p: {unlimited: true}\n");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->server.max_held_requests, 7u);
  EXPECT_EQ(c->server.max_held_per_identity, 2u);
  EXPECT_FALSE(
      ParseConfig("server: {max_held_requests: -1}\nplans:\n  p: {unlimited: true}\n").ok());
}

}  // namespace
}  // namespace tollgate::config
