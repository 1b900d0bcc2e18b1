// Tests that can catch a wrong gradient, at np 1-4: every ZeRO stage (np 1-4), every
// pipeline schedule (pp = np >= 2) and dp 2 x pp 2 at every ZeRO stage (np 4) against the
// single-process run with the same global batch, clipping off.
//
// After the first AdamW step, adam.m = (1 - beta1) g and adam.v = (1 - beta2) g^2 exactly
// (the moments start at zero): the summed gradient itself, before anything normalises it.
// So the first step's moments are compared by relative L2 (1e-6: float sums in another
// order; a 1e-3 scale error on one stage's gradients is 1e-3 on its elements), and after
// three steps the parameters and both moments element by element, relative to their
// magnitude. adam.m is also compared across the schedules, bitwise (they add each gradient
// in the same order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "examples/gpt/model_presets.h"
#include "examples/train/trainer.h"
#include "mpi/mpi_test_main.h"
#include "mpi/pipeline_test_config.h"
#include "runtime/config/train_config.h"
#include "runtime/state_names.h"

namespace etr::train {
namespace {

constexpr double kRelL2 = 1e-6;
// Element-wise after 3 steps: |got - want| <= kRel |want| + kFloor rms(want).
constexpr double kRel = 1e-4;
constexpr double kFloor = 1e-4;

// pipeline_test's model and batch, clipping off.
TrainConfig config(std::vector<std::string> extra) {
  extra.insert(extra.begin(), "optimizer.grad_clip=0");
  return testing_config::pipeline_config(extra);
}

struct Moments {
  std::vector<float> param, m, v;
};

Moments state_of(Trainer& t) {
  return {t.gather_state(state::kParam), t.gather_state(state::kAdamM), t.gather_state(state::kAdamV)};
}

// After step 1 and after step 3.
struct Trajectory {
  Moments first, third;
};

Trajectory run(Trainer& t) {
  Trajectory r;
  t.train_step();
  r.first = state_of(t);
  t.train_step();
  t.train_step();
  r.third = state_of(t);
  return r;
}

Trajectory reference(const TrainConfig& c) {
  Group self(MPI_COMM_SELF, "self", false);
  Trainer t(c, self, testing::world().log());
  return run(t);
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// "" or the count of elements outside the bound and the worst one.
std::string elementwise(const std::vector<float>& got, const std::vector<float>& want) {
  double sq = 0;
  for (float x : want) sq += static_cast<double>(x) * x;
  const double floor = kFloor * std::sqrt(sq / std::max<size_t>(want.size(), 1));
  size_t bad = 0, worst = 0;
  double worst_excess = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double bound = kRel * std::fabs(want[i]) + floor;
    if (err > bound) {
      ++bad;
      if (err / bound > worst_excess) worst_excess = err / bound, worst = i;
    }
  }
  if (bad == 0) return "";
  return std::to_string(bad) + " of " + std::to_string(want.size()) + " elements, worst " +
         std::to_string(worst) + ": " + std::to_string(got[worst]) + " against " + std::to_string(want[worst]);
}

void expect_matches(const Trajectory& want, const Trajectory& got, const std::string& what) {
  ASSERT_EQ(want.first.m.size(), got.first.m.size()) << what;
  EXPECT_LE(rel_l2(got.first.m, want.first.m), kRelL2) << what << ": the first step's gradient (adam.m)";
  EXPECT_LE(rel_l2(got.first.v, want.first.v), 2 * kRelL2) << what << ": the first step's squares (adam.v)";
  EXPECT_EQ(elementwise(got.third.param, want.third.param), "") << what << ": parameters after 3 steps";
  EXPECT_EQ(elementwise(got.third.m, want.third.m), "") << what << ": adam.m after 3 steps";
  EXPECT_EQ(elementwise(got.third.v, want.third.v), "") << what << ": adam.v after 3 steps";
}

TEST(GradientCheck, EveryZeroStageHasTheSingleProcessGradient) {
  const int n = testing::world().group().size();
  const Trajectory want = reference(config({}));
  for (int stage = 0; stage <= 3; ++stage) {
    Trainer t(config({"parallel.zero_stage=" + std::to_string(stage)}), testing::world());
    expect_matches(want, run(t), "ZeRO stage " + std::to_string(stage) + " on " + std::to_string(n) + " ranks");
  }
}

void every_schedule(int pp, const std::vector<std::string>& extra, const std::string& label) {
  const Trajectory want = reference(config({}));
  std::vector<float> first_m;
  for (std::string s : {"1f1b", "gpipe", "interleaved", "zb-h1", "zb-v"}) {
    std::vector<std::string> o = extra;
    o.push_back("parallel.pp=" + std::to_string(pp));
    o.push_back("parallel.pp_schedule=" + s);
    Trainer t(config(o), testing::world());
    const Trajectory got = run(t);
    const std::string what = s + " at " + label;
    expect_matches(want, got, what);
    if (first_m.empty()) {
      first_m = got.first.m;
    } else {
      EXPECT_EQ(0, std::memcmp(first_m.data(), got.first.m.data(), first_m.size() * sizeof(float)))
          << what << ": the first step's adam.m differs from 1F1B's";
    }
  }
}

TEST(GradientCheck, EveryScheduleHasTheSingleProcessGradient) {
  const int n = testing::world().group().size();
  if (n < 2) GTEST_SKIP() << "a pipeline needs 2 ranks (np 1 runs the ZeRO stages above)";
  every_schedule(n, {}, "pp " + std::to_string(n));
}

TEST(GradientCheck, DpTimesPpHasTheSingleProcessGradientAtEveryZeroStage) {
  if (testing::world().group().size() != 4) GTEST_SKIP() << "dp 2 x pp 2 needs 4 ranks";
  for (int z = 0; z <= 3; ++z) {
    every_schedule(2, {"parallel.zero_stage=" + std::to_string(z)}, "dp 2 x pp 2, ZeRO " + std::to_string(z));
  }
}

}  // namespace
}  // namespace etr::train
