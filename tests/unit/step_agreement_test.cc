// StepAgreement (parallel/step_agreement.h): three ranks' values summed field by field,
// with the sum played by this test (the elementwise sum MPI would give), read back as the
// same decisions on every rank.
#include "parallel/step_agreement.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace etr {
namespace {

// Agrees `ranks` as if each were one process: each rank's vector is captured, then every
// rank is handed the elementwise sum.
void agree_all(std::vector<StepAgreement>& ranks) {
  std::vector<std::vector<double>> sent;
  for (StepAgreement& r : ranks) {
    r.agree([&](double* v, int n) { sent.emplace_back(v, v + n); }, static_cast<int>(ranks.size()));
  }
  std::vector<double> total(sent.front().size(), 0.0);
  for (const auto& v : sent) {
    for (size_t i = 0; i < v.size(); ++i) total[i] += v[i];
  }
  for (StepAgreement& r : ranks) {
    r.agree([&](double* v, int n) { std::copy(total.begin(), total.begin() + n, v); }, static_cast<int>(ranks.size()));
  }
}

TEST(StepAgreement, EveryFieldIsSummedAndEveryRankReadsTheSameDecision) {
  std::vector<StepAgreement> r(3);
  for (int i = 0; i < 3; ++i) {
    r[i].loss = 1.0 + i;
    r[i].bubble = 0.1 * (i + 1);
    r[i].norm_wait_seconds = 0.01 * (i + 1);
    r[i].goodput_term = 10.0 * (i + 1);
    r[i].compute_seconds = 2.0 * (i + 1);
    r[i].optimizer_seconds = 0.5 * (i + 1);
  }
  r[1].resize = true;
  r[2].out_of_memory = true;
  r[0].replan = true;
  r[2].stop = true;
  agree_all(r);
  for (const StepAgreement& a : r) {
    EXPECT_DOUBLE_EQ(a.loss, 6.0);
    EXPECT_TRUE(a.resize);
    EXPECT_TRUE(a.stop);
    EXPECT_TRUE(a.out_of_memory);
    EXPECT_TRUE(a.replan);
    EXPECT_FALSE(a.nonfinite_norm);
    EXPECT_DOUBLE_EQ(a.bubble_mean(), 0.2);
    EXPECT_DOUBLE_EQ(a.norm_wait_mean(), 0.02);
    EXPECT_DOUBLE_EQ(a.goodput_term, 60.0);
    EXPECT_DOUBLE_EQ(a.compute_seconds, 12.0);
    EXPECT_DOUBLE_EQ(a.optimizer_seconds, 3.0);
    EXPECT_EQ(a.ranks, 3);
  }
}

// A NaN on one rank makes every rank's loss not finite; a non-finite norm on one rank
// is seen by all.
TEST(StepAgreement, ANonFiniteValueAnywhereIsSeenEverywhere) {
  std::vector<StepAgreement> r(3);
  r[1].loss = std::numeric_limits<double>::quiet_NaN();
  r[2].nonfinite_norm = true;
  agree_all(r);
  for (const StepAgreement& a : r) {
    EXPECT_FALSE(std::isfinite(a.loss));
    EXPECT_TRUE(a.nonfinite_norm);
    EXPECT_FALSE(a.out_of_memory);
  }
}

}  // namespace
}  // namespace etr
