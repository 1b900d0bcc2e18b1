// etr-run's learned heartbeat timeout (launcher/heartbeat_timeout.h) against a reference:
// the nearest-rank quantile of the gaps, sorted in full, times the multiple, within the
// floor and the ceiling; the initial value until enough gaps were seen; a fixed timeout
// learns nothing; old gaps leave the window.
#include "launcher/heartbeat_timeout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace etr::launcher {
namespace {

using namespace std::chrono_literals;

// The timeout the options give for `gaps` (the window's), computed independently.
std::chrono::milliseconds reference(const HeartbeatTimeoutOptions& o, std::vector<double> gaps) {
  std::sort(gaps.begin(), gaps.end());
  const double n = static_cast<double>(gaps.size());
  const double q = gaps[static_cast<size_t>(std::ceil(o.quantile * n)) - 1];
  const double t = std::min(std::max(o.multiple * q, o.floor.count() / 1000.0), o.ceiling.count() / 1000.0);
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(t * 1000)));
}

TEST(HeartbeatTimeout, LearnsTheMultipleOfTheGapsHighQuantile) {
  HeartbeatTimeoutOptions o;
  HeartbeatTimeout t(o);
  EXPECT_TRUE(t.learning());
  std::mt19937 rng(7);
  std::normal_distribution<double> jitter(0.0, 0.04);
  std::vector<double> gaps;
  for (int i = 0; i < 3000; ++i) {
    gaps.push_back(0.25 + std::abs(jitter(rng)));
    t.observe_gap(gaps.back());
    if (i + 1 < o.min_gaps) {
      EXPECT_EQ(t.current(), o.initial) << "before " << o.min_gaps << " gaps: the initial timeout";
    }
  }
  gaps.push_back(0.9);  // above every other gap: learned at once
  t.observe_gap(gaps.back());
  EXPECT_EQ(t.current(), reference(o, gaps)) << t.describe();
  EXPECT_GT(t.current(), o.floor);
  EXPECT_NE(t.describe().find("learned: 4 x the 99.9th percentile"), std::string::npos) << t.describe();
}

TEST(HeartbeatTimeout, OldGapsLeaveTheWindowAndTheFloorAndCeilingHold) {
  HeartbeatTimeoutOptions o;
  o.window = 512;
  HeartbeatTimeout t(o);
  for (int i = 0; i < 512; ++i) t.observe_gap(0.6);  // a loaded machine
  EXPECT_EQ(t.current(), 2400ms) << t.describe();
  // Then a quiet one: once the loaded gaps left the window, the floor (a lower quantile is
  // taken up within 16 gaps).
  for (int i = 0; i < 512 + 16; ++i) t.observe_gap(0.01);
  EXPECT_EQ(t.current(), o.floor) << t.describe();
  t.observe_gap(20.0);  // one pause of 20 s (a rank paused and back): the ceiling
  EXPECT_EQ(t.current(), o.ceiling) << "a gap above the quantile raises the timeout at once";
  t.observe_gap(-1.0);  // a clock step: ignored
  t.observe_gap(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(t.gaps_seen(), 512 + 528 + 1);
}

TEST(HeartbeatTimeout, AFixedTimeoutLearnsNothing) {
  HeartbeatTimeoutOptions o;
  o.fixed = 2000ms;
  HeartbeatTimeout t(o);
  for (int i = 0; i < 1000; ++i) t.observe_gap(0.01);
  EXPECT_FALSE(t.learning());
  EXPECT_EQ(t.current(), 2000ms);
  EXPECT_EQ(t.describe(), "2.00 s (fixed)");
}

}  // namespace
}  // namespace etr::launcher
