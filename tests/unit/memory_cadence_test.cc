// MemoryCadence (parallel/memory_cadence.h): the memory tier's steps, fixed or bounded by
// a save's measured cost against the step time; the intervals below are worked out by
// hand from the rule (the smallest k with cost / k <= max_stall x step, at least every).
#include "parallel/memory_cadence.h"

#include <gtest/gtest.h>

#include <vector>

namespace etr {
namespace {

// The steps a run from `from` to `to` saves (a copy of the cadence: `c` is unchanged).
std::vector<int64_t> due_steps(MemoryCadence c, int64_t from, int64_t to) {
  std::vector<int64_t> out;
  for (int64_t s = from; s <= to; ++s) {
    if (!c.due(s)) continue;
    out.push_back(s);
    c.saved(s);
  }
  return out;
}

TEST(MemoryCadence, WithoutABoundEveryNthStepWhateverASaveCosts) {
  MemoryCadence c(3, 0.0);
  for (int i = 0; i < 10; ++i) c.step_ended(0.1);
  EXPECT_EQ(c.observe(5.0, c.step_seconds()), "");  // a save as long as 50 steps changes nothing
  EXPECT_EQ(c.interval(), 3);
  EXPECT_EQ(due_steps(c, 1, 10), (std::vector<int64_t>{3, 6, 9}));
}

TEST(MemoryCadence, ACostlySaveSpreadsTheSavesWithinTheBound) {
  MemoryCadence c(1, 0.01);  // 1 % of a 100 ms step: 1 ms a step
  for (int i = 0; i < 9; ++i) c.step_ended(0.100);
  EXPECT_EQ(c.interval(), 1);
  const std::string line =
      c.observe(0.0035, c.step_seconds());  // 3.5 ms: every 4 steps (0.875 ms a step)
  EXPECT_EQ(c.interval(), 4);
  EXPECT_NE(line.find("every 4 step(s)"), std::string::npos) << line;
  EXPECT_NE(line.find("3.5 ms, 3.50 %"), std::string::npos) << line;
  c.saved(8);
  EXPECT_EQ(due_steps(c, 9, 20), (std::vector<int64_t>{12, 16, 20}));
}

TEST(MemoryCadence, ItShrinksOnlyWithAMarginAndNeverBelowEvery) {
  MemoryCadence c(2, 0.01);
  for (int i = 0; i < 9; ++i) c.step_ended(0.100);
  c.observe(0.0035, c.step_seconds());
  ASSERT_EQ(c.interval(), 4);
  // The median of the recent costs falls to 2.9 ms: 3 fits (0.97 ms a step) but not with
  // the 20 % margin (3.48 ms needs 4), so the interval stays.
  for (int i = 0; i < 3; ++i) c.observe(0.0029, c.step_seconds());
  EXPECT_EQ(c.interval(), 4);
  // At 2.4 ms, 3 fits with the margin (2.88 ms / 3 < 1 ms).
  for (int i = 0; i < 5; ++i) c.observe(0.0024, c.step_seconds());
  EXPECT_EQ(c.interval(), 3);
  // Cheap saves: back to `every`, the floor.
  for (int i = 0; i < 5; ++i) c.observe(0.0001, c.step_seconds());
  EXPECT_EQ(c.interval(), 2);
}

TEST(MemoryCadence, TheStepTimeIsTheRecentMedian) {
  MemoryCadence c(1, 0.01);
  for (double s : {0.100, 0.100, 5.0, 0.100, 0.100}) c.step_ended(s);  // one slow step (an eval)
  EXPECT_DOUBLE_EQ(c.step_seconds(), 0.100);
  c.observe(0.0025, c.step_seconds());
  EXPECT_EQ(c.interval(), 3);
}

TEST(MemoryCadence, NoStepsMeasuredYetChangesNothing) {
  MemoryCadence c(1, 0.01);
  EXPECT_EQ(c.step_seconds(), 0.0);
  EXPECT_EQ(c.observe(1.0, c.step_seconds()), "");
  EXPECT_EQ(c.interval(), 1);
}

TEST(MemoryCadence, DueAtOnceWhenAnIntervalHasPassedSinceTheLastSave) {
  MemoryCadence c(5, 0.0);
  c.saved(1000);  // a resume at step 1000
  EXPECT_FALSE(c.due(1004));
  EXPECT_TRUE(c.due(1005));  // a multiple
  c.saved(1005);
  MemoryCadence d(5, 0.0);  // never saved: step 1003 is 1003 steps after "step 0"
  EXPECT_TRUE(d.due(1003));
}

}  // namespace
}  // namespace etr
