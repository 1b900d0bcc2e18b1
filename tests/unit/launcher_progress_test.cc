// etr-run's progress watchdog (launcher/progress_watch.h) on scripted heartbeats with a
// scripted clock: the limit follows the recent step time above the floor, a stage where
// stalls are expected and a launch's first step get the allowance, the stall is counted
// from the last change (not from the last step), the rank behind the others is named, and
// a stall is reported once.
#include "launcher/progress_watch.h"

#include <gtest/gtest.h>

#include <vector>

namespace etr::launcher {
namespace {

using namespace std::chrono_literals;
using Clock = ProgressWatch::Clock;
using P = HeartbeatWatch::Position;

ProgressLimits limits(double multiple, std::chrono::milliseconds floor, std::chrono::milliseconds allowance) {
  ProgressLimits l;
  l.multiple = multiple;
  l.floor = floor;
  l.allowance = allowance;
  return l;
}

// Two ranks stepping together every `every` from `t`, `n` steps from step `from`.
Clock::time_point run_steps(ProgressWatch& w, Clock::time_point t, int64_t from, int n,
                            std::chrono::milliseconds every) {
  for (int i = 0; i <= n; ++i, t += every) {
    EXPECT_FALSE(w.observe({{0, from + i, RankStage::kCompute}, {1, from + i, RankStage::kCompute}}, t))
        << "step " << from + i;
  }
  return t - every;
}

TEST(ProgressWatch, AStallPastTenStepTimesNamesTheRankBehind) {
  ProgressWatch w(limits(10, 500ms, 60s));
  Clock::time_point t{};
  w.begin_launch(t);
  t = run_steps(w, t, 5, 20, 100ms);
  EXPECT_NEAR(w.recent_step_seconds(), 0.1, 1e-9);
  // Rank 0 finished step 26's compute and waits in the step's sums; rank 1 never does.
  const std::vector<P> stalled = {{0, 25, RankStage::kStepSums}, {1, 25, RankStage::kCompute}};
  t += 50ms;
  EXPECT_FALSE(w.observe(stalled, t));  // a change: the stall counts from here
  EXPECT_FALSE(w.observe(stalled, t + 990ms)) << "10 x 0.1 s is the limit (above the 0.5 s floor)";
  const auto s = w.observe(stalled, t + 1010ms);
  ASSERT_TRUE(s);
  EXPECT_NEAR(s->stalled_seconds, 1.01, 1e-6);
  EXPECT_NEAR(s->limit_seconds, 1.0, 1e-6);
  EXPECT_EQ(s->step, 25);
  EXPECT_EQ(s->rank, -1) << "both ranks completed step 25: nobody is behind";
  EXPECT_EQ(s->where, "rank 1 in compute; rank 0 in step-sums");
  EXPECT_NE(s->describe().find("--stuck-after 10 x the recent step time of 0.10 s"), std::string::npos)
      << s->describe();
  EXPECT_FALSE(w.observe(stalled, t + 5s)) << "reported once";
  // Behind: rank 2 still at step 24 while the others completed 25.
  w.begin_launch(t);
  t = run_steps(w, t, 5, 20, 100ms);
  const std::vector<P> behind = {{0, 25, RankStage::kStepSums}, {1, 25, RankStage::kStepSums},
                                 {2, 24, RankStage::kCompute}};
  EXPECT_FALSE(w.observe(behind, t + 1ms));
  const auto b = w.observe(behind, t + 2s);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->rank, 2);
  EXPECT_EQ(b->step, 24);
  EXPECT_EQ(b->where, "rank 2 in compute (behind every other rank)");
}

TEST(ProgressWatch, TheFloorHoldsForFastSteps) {
  ProgressWatch w(limits(10, 3s, 60s));
  Clock::time_point t{};
  w.begin_launch(t);
  t = run_steps(w, t, 0, 30, 10ms);
  const std::vector<P> same = {{0, 30, RankStage::kCompute}, {1, 30, RankStage::kCompute}};
  EXPECT_FALSE(w.observe(same, t + 2900ms)) << "10 x 10 ms is below the 3 s floor";
  const auto s = w.observe(same, t + 3100ms);
  ASSERT_TRUE(s);
  EXPECT_NE(s->limit_why.find("--stuck-floor"), std::string::npos) << s->limit_why;
}

TEST(ProgressWatch, SlowStagesAndTheFirstStepGetTheAllowance) {
  ProgressWatch w(limits(10, 1s, 30s));
  Clock::time_point t{};
  w.begin_launch(t);
  // Start-up and the first step: 20 s without a step is within the allowance.
  const std::vector<P> starting = {{0, 100, RankStage::kStart}, {1, 100, RankStage::kCompute}};
  EXPECT_FALSE(w.observe(starting, t));
  const std::vector<P> first = {{0, 100, RankStage::kCompute}, {1, 100, RankStage::kCompute}};
  EXPECT_FALSE(w.observe(first, t + 1s));
  EXPECT_FALSE(w.observe(first, t + 20s)) << "no step yet in this launch: the allowance holds";
  t = run_steps(w, t + 21s, 100, 10, 100ms);
  // An evaluation of 25 s on rank 0, rank 1 waiting in compute for it.
  const std::vector<P> eval = {{0, 110, RankStage::kEvaluate}, {1, 110, RankStage::kCompute}};
  EXPECT_FALSE(w.observe(eval, t + 10ms));
  EXPECT_FALSE(w.observe(eval, t + 25s)) << "evaluation: the allowance";
  // Back to training: the stall counts from the end of the evaluation, not the last step.
  const std::vector<P> back = {{0, 110, RankStage::kCompute}, {1, 110, RankStage::kCompute}};
  EXPECT_FALSE(w.observe(back, t + 26s));
  EXPECT_FALSE(w.observe(back, t + 26s + 900ms));
  ASSERT_TRUE(w.observe(back, t + 27s + 100ms)) << "1 s (the floor) after the last change";
  // A checkpoint that never ends passes the allowance too.
  w.begin_launch(t);
  t = run_steps(w, t, 0, 5, 100ms);
  const std::vector<P> save = {{0, 5, RankStage::kCheckpoint}, {1, 5, RankStage::kCheckpoint}};
  EXPECT_FALSE(w.observe(save, t + 1ms));
  EXPECT_FALSE(w.observe(save, t + 29s));
  const auto s = w.observe(save, t + 31s);
  ASSERT_TRUE(s);
  EXPECT_NE(s->limit_why.find("--stuck-allowance"), std::string::npos) << s->limit_why;
}

TEST(ProgressWatch, OffWhenTheMultipleIsZero) {
  ProgressWatch w(limits(0, 1s, 1s));
  Clock::time_point t{};
  w.begin_launch(t);
  const std::vector<P> same = {{0, 3, RankStage::kCompute}};
  EXPECT_FALSE(w.observe(same, t));
  EXPECT_FALSE(w.observe(same, t + 1h));
}

}  // namespace
}  // namespace etr::launcher
