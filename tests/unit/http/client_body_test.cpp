#include "http/client_body.hpp"

#include <gtest/gtest.h>

namespace tollgate::http {
namespace {

using std::chrono::seconds;

BodyPace Pace(Clock::time_point start) {
  BodyPace p{.grace = milliseconds(10'000), .bytes_per_second = 1024};
  p.Start(start);
  return p;
}

TEST(BodyPace, AllowsGraceFromItsStart) {
  const Clock::time_point t0{};
  const BodyPace p = Pace(t0);
  EXPECT_EQ(p.Left(t0), seconds(10));
  EXPECT_EQ(p.Left(t0 + seconds(4)), seconds(6));
  EXPECT_EQ(p.Left(t0 + seconds(11)), Clock::duration::zero());
}

// Issue 31 review: 307,199 bytes sent at once earned 300 s of silence; the credit never exceeds
// the grace, so a stall after any burst is cut after at most the grace.
TEST(BodyPace, NoBurstEarnsMoreThanTheGrace) {
  const Clock::time_point t0{};
  BodyPace p = Pace(t0);
  p.Received(307'199, t0 + seconds(1));
  EXPECT_EQ(p.Left(t0 + seconds(1)), seconds(10));
  p.Received(100 << 20, t0 + seconds(2));
  EXPECT_EQ(p.Left(t0 + seconds(2)), seconds(10));
  EXPECT_EQ(p.Left(t0 + seconds(12)), Clock::duration::zero());
}

TEST(BodyPace, ATrickleBelowTheRateRunsOut) {
  const Clock::time_point t0{};
  BodyPace p = Pace(t0);
  Clock::time_point now = t0;
  int reads = 0;
  // A byte every 9 s: each gap is within the grace, but the average is far below 1 KiB/s.
  while (p.Left(now) > Clock::duration::zero() && reads < 100) {
    now += seconds(9);
    if (p.Left(now) == Clock::duration::zero()) break;
    p.Received(1, now);
    ++reads;
  }
  EXPECT_LE(reads, 2);
}

TEST(BodyPace, AnUploadAtTheRateNeverRunsOut) {
  const Clock::time_point t0{};
  BodyPace p = Pace(t0);
  Clock::time_point now = t0;
  for (int i = 0; i < 10'000; ++i) {  // 1 KiB every second, for almost three hours
    now += seconds(1);
    ASSERT_GT(p.Left(now), Clock::duration::zero()) << i;
    p.Received(1024, now);
  }
  EXPECT_EQ(p.Left(now), seconds(10));
}

TEST(BodyPace, StartingAgainGivesNoCreditForWhatCameBefore) {
  const Clock::time_point t0{};
  BodyPace p = Pace(t0);
  p.Received(64 << 10, t0);  // buffered before connecting
  p.Start(t0 + seconds(3));  // an upstream connection taken: the grace from there, no more
  EXPECT_EQ(p.Left(t0 + seconds(3)), seconds(10));
  EXPECT_EQ(p.Left(t0 + seconds(13)), Clock::duration::zero());
}

}  // namespace
}  // namespace tollgate::http
