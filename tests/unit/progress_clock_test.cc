// The progress line's estimate of the time left (parallel/progress_clock.h), on a clock
// the test drives, against the arithmetic of a steady and of a changing pace.
#include "parallel/progress_clock.h"

#include <gtest/gtest.h>

#include <cmath>

namespace etr {
namespace {

using std::chrono::milliseconds;

TEST(ProgressClock, NoEstimateBeforeTwoPoints) {
  ProgressClock c;
  const auto t = ProgressClock::Clock::time_point{};
  EXPECT_TRUE(std::isnan(c.update(0.1, t)));
  EXPECT_TRUE(std::isnan(c.update(0.1, t + milliseconds(500))));  // no progress in between
}

TEST(ProgressClock, SteadyPaceGivesTheExactTimeLeft) {
  ProgressClock c;
  auto t = ProgressClock::Clock::time_point{};
  c.update(0.0, t);
  // 1 % per second: at 10 % done, 90 s are left; the smoothing keeps a steady pace exact.
  for (int i = 1; i <= 10; ++i) {
    t += milliseconds(1000);
    const double left = c.update(i / 100.0, t);
    EXPECT_NEAR(left, 100.0 - i, 1e-9) << i;
  }
}

TEST(ProgressClock, FollowsAChangeOfPaceExponentially) {
  ProgressClock c;
  auto t = ProgressClock::Clock::time_point{};
  c.update(0.0, t);
  t += milliseconds(1000);
  c.update(0.01, t);  // 100 s per unit
  t += milliseconds(2000);
  // 200 s per unit now: the pace is 0.3 x 200 + 0.7 x 100 = 130 s per unit, 98 % left.
  EXPECT_NEAR(c.update(0.02, t), 0.98 * 130.0, 1e-9);
}

TEST(ProgressClock, ARestartedCountStartsOver) {
  ProgressClock c;
  auto t = ProgressClock::Clock::time_point{};
  c.update(0.5, t);
  c.update(0.6, t + milliseconds(1000));
  EXPECT_TRUE(std::isnan(c.update(0.2, t + milliseconds(2000))));
  EXPECT_NEAR(c.update(0.3, t + milliseconds(3000)), 7.0, 1e-9);  // 10 s per unit, 70 % left
}

TEST(FormatDuration, ReadableUnits) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(44.6), "45s");
  EXPECT_EQ(format_duration(200), "3m20s");
  EXPECT_EQ(format_duration(2 * 3600 + 5 * 60 + 7), "2h05m");
  EXPECT_EQ(format_duration(3 * 86400 + 4 * 3600), "3d04h");
  EXPECT_EQ(format_duration(std::nan("")), "?");
  EXPECT_EQ(format_duration(-1), "?");
}

}  // namespace
}  // namespace etr
