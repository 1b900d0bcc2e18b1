// Tests of parallel/goodput.h: the noise scale estimator on a synthetic problem whose
// noise scale is known (per-sample gradients mu + Gaussian noise), over unequal data-
// parallel shares and over one rank's first micro-batch; the step-time fit; the policy's
// moves, holds and grid; the learning-rate rules against hand-derived values.
#include "parallel/goodput.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/error.h"

namespace etr {
namespace {

// Per-sample gradients g_i = mu + s z_i, z_i ~ N(0, I) in kDim dimensions: Sigma = s^2 I,
// tr(Sigma) = kDim s^2, |G|^2 = |mu|^2, B_noise = kDim s^2 / |mu|^2.
class SyntheticProblem {
 public:
  static constexpr int kDim = 1000;
  SyntheticProblem(double mu_coord, double s, uint32_t seed)
      : mu_(kDim, mu_coord), s_(s), rng_(seed) {}
  double true_grad_sq() const { return kDim * mu_[0] * mu_[0]; }
  double true_trace() const { return kDim * s_ * s_; }
  double true_noise_scale() const { return true_trace() / true_grad_sq(); }

  // The sum of n fresh per-sample gradients.
  std::vector<double> sum_of(uint64_t n) {
    std::vector<double> sum(kDim, 0.0);
    for (uint64_t i = 0; i < n; ++i) {
      for (int j = 0; j < kDim; ++j) sum[j] += mu_[j] + s_ * normal_(rng_);
    }
    return sum;
  }

 private:
  std::vector<double> mu_;
  double s_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_;
};

double sq_norm_scaled(const std::vector<double>& v, double scale) {
  double s = 0;
  for (double x : v) s += x * scale * x * scale;
  return s;
}

// One data-parallel step: each rank's mean gradient over its share, and the global mean's
// squared norm.
struct DataParallelStep {
  std::vector<RankGradient> ranks;
  double global_sq_norm = 0;
  NoiseSample sample() const {
    const auto s = data_parallel_sample(ranks, global_sq_norm);
    EXPECT_TRUE(s.has_value());
    return s.value_or(NoiseSample{});
  }
};

DataParallelStep data_parallel_step(SyntheticProblem& p, const std::vector<uint64_t>& shares) {
  const uint64_t batch = std::accumulate(shares.begin(), shares.end(), uint64_t{0});
  std::vector<double> total(SyntheticProblem::kDim, 0.0);
  DataParallelStep step;
  for (uint64_t n : shares) {
    const std::vector<double> sum = p.sum_of(n);
    for (int j = 0; j < SyntheticProblem::kDim; ++j) total[j] += sum[j];
    step.ranks.push_back({n, sq_norm_scaled(sum, 1.0 / static_cast<double>(n))});
  }
  step.global_sq_norm = sq_norm_scaled(total, 1.0 / static_cast<double>(batch));
  return step;
}

// One single-rank step of `steps` samples whose first micro-batch has `first` samples.
NoiseSample micro_batch_step(SyntheticProblem& p, uint64_t first, uint64_t steps) {
  const std::vector<double> head = p.sum_of(first);
  std::vector<double> all = p.sum_of(steps - first);
  for (int j = 0; j < SyntheticProblem::kDim; ++j) all[j] += head[j];
  const auto s = micro_batch_sample(sq_norm_scaled(head, 1.0 / first), first,
                                    sq_norm_scaled(all, 1.0 / steps), steps);
  EXPECT_TRUE(s.has_value());
  return *s;
}

// B_noise = 640 / 10 = 64 against global batches of 32.
constexpr double kMu = 0.1;
constexpr double kNoise = 0.8;
constexpr int kSteps = 300;

TEST(GradientNoiseScale, DataParallelUnequalSharesRecoverTheKnownNoiseScale) {
  SyntheticProblem p(kMu, kNoise, 20240611);
  ASSERT_DOUBLE_EQ(p.true_noise_scale(), 64.0);
  const std::vector<uint64_t> shares = {3, 5, 8, 16};  // B = 32, b_small = 8
  GradientNoiseScale gns(0.99);
  for (int t = 0; t < kSteps; ++t) ASSERT_TRUE(gns.update(data_parallel_step(p, shares).sample()));
  ASSERT_TRUE(gns.noise_scale().has_value());
  EXPECT_NEAR(*gns.noise_scale(), p.true_noise_scale(), 0.10 * p.true_noise_scale());
  EXPECT_NEAR(gns.trace(), p.true_trace(), 0.10 * p.true_trace());
  EXPECT_NEAR(gns.grad_sq(), p.true_grad_sq(), 0.10 * p.true_grad_sq());
  EXPECT_EQ(gns.updates(), static_cast<uint64_t>(kSteps));
}

TEST(GradientNoiseScale, OneRankFirstMicroBatchRecoversTheKnownNoiseScale) {
  SyntheticProblem p(kMu, kNoise, 77);
  GradientNoiseScale gns(0.99);
  for (int t = 0; t < kSteps; ++t) ASSERT_TRUE(gns.update(micro_batch_step(p, 8, 32)));
  EXPECT_NEAR(*gns.noise_scale(), p.true_noise_scale(), 0.10 * p.true_noise_scale());
}

// The mean of a statistic over many steps is within 4 standard errors (of those same
// steps) of `truth`, and the standard error is small enough to tell a 40 % bias.
void expect_mean_near(const std::vector<double>& x, double truth, const char* what) {
  const double n = static_cast<double>(x.size());
  const double mean = std::accumulate(x.begin(), x.end(), 0.0) / n;
  double var = 0;
  for (double v : x) var += (v - mean) * (v - mean);
  const double se = std::sqrt(var / (n - 1) / n);
  EXPECT_LT(std::abs(mean - truth), 4 * se) << what << ": mean " << mean << " truth " << truth;
  EXPECT_LT(se, 0.1 * truth) << what;
}

// The one-step estimates are unbiased over unequal shares, where weighting the ranks
// equally with b_small = B / R (the obvious mistake) is far off.
TEST(GradientNoiseScale, OneStepEstimatesAreUnbiased) {
  SyntheticProblem p(kMu, kNoise, 5);
  const std::vector<uint64_t> shares = {1, 2, 4, 25};
  std::vector<double> g, tr, naive_tr;
  for (int t = 0; t < 400; ++t) {
    const DataParallelStep step = data_parallel_step(p, shares);
    const auto e = estimate_noise(step.sample());
    ASSERT_TRUE(e.has_value());
    g.push_back(e->grad_sq);
    tr.push_back(e->trace);
    double equal = 0;
    for (const RankGradient& r : step.ranks) equal += r.sq_norm / 4;
    naive_tr.push_back(estimate_noise({equal, 8, step.global_sq_norm, 32})->trace);
  }
  expect_mean_near(g, p.true_grad_sq(), "|G|^2");
  expect_mean_near(tr, p.true_trace(), "tr(Sigma)");
  // E = (|G|^2 + tr mean(1/n_r) - |G|^2 - tr / B) / (1/8 - 1/32) = 4.44 tr.
  const double naive = std::accumulate(naive_tr.begin(), naive_tr.end(), 0.0) / 400;
  EXPECT_GT(naive, 3 * p.true_trace());
}

TEST(GradientNoiseScale, SampleConstructors) {
  const RankGradient ranks[] = {{2, 5.0}, {0, 1e9}, {6, 1.0}};  // the empty rank is skipped
  const auto a = data_parallel_sample(ranks, 0.5);
  const auto b = data_parallel_sample(2 * 5.0 + 6 * 1.0, 2, 8, 0.5);
  ASSERT_TRUE(a && b);
  EXPECT_DOUBLE_EQ(a->small_sq_norm, 2.0);
  EXPECT_DOUBLE_EQ(a->small_batch, 4.0);  // B / R
  EXPECT_DOUBLE_EQ(a->big_batch, 8.0);
  EXPECT_DOUBLE_EQ(b->small_sq_norm, a->small_sq_norm);
  EXPECT_DOUBLE_EQ(b->small_batch, a->small_batch);
  const RankGradient one[] = {{8, 1.0}};
  EXPECT_FALSE(data_parallel_sample(one, 1.0));      // one rank: no small batch
  EXPECT_FALSE(micro_batch_sample(1.0, 8, 1.0, 8));  // one micro-batch
  EXPECT_FALSE(micro_batch_sample(1.0, 0, 1.0, 8));
  // Contribution (n/B) g -> g.
  EXPECT_DOUBLE_EQ(mean_gradient_sq_norm(0.25 * 3.0, 8, 16), 3.0);
}

TEST(GradientNoiseScale, NonFiniteOrUnusableStepsAreIgnored) {
  GradientNoiseScale gns(0.9);
  ASSERT_TRUE(gns.update(NoiseSample{12.0, 4, 6.0, 16}));
  const NoiseScaleState before = gns.state();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(gns.update(NoiseSample{nan, 4, 6.0, 16}));
  EXPECT_FALSE(gns.update(NoiseSample{12.0, 4, inf, 16}));
  EXPECT_FALSE(gns.update(NoiseSample{-1.0, 4, 6.0, 16}));
  EXPECT_FALSE(gns.update(NoiseSample{12.0, 16, 6.0, 16}));  // b_small == B
  EXPECT_FALSE(gns.update(std::optional<NoiseSample>{}));
  EXPECT_EQ(gns.state().grad_sq_ema, before.grad_sq_ema);
  EXPECT_EQ(gns.state().trace_ema, before.trace_ema);
  EXPECT_EQ(gns.updates(), 1u);
  EXPECT_EQ(gns.ignored(), 5u);
}

TEST(GradientNoiseScale, BiasCorrectionClampAndRestore) {
  GradientNoiseScale gns(0.95);
  EXPECT_FALSE(gns.noise_scale().has_value());
  // S = 12 at 4, L = 6 at 16: tr = 6 / (1/4 - 1/16) = 32, |G|^2 = (96 - 48) / 12 = 4.
  ASSERT_TRUE(gns.update(NoiseSample{12.0, 4, 6.0, 16}));
  EXPECT_DOUBLE_EQ(gns.trace(), 32.0);  // bias-corrected: the first step exactly
  EXPECT_DOUBLE_EQ(gns.grad_sq(), 4.0);
  EXPECT_DOUBLE_EQ(*gns.noise_scale(), 8.0);

  GradientNoiseScale all_noise;  // |G|^2 estimate < 0: S = 12, L = 2 -> (32 - 48) / 12
  all_noise.update(NoiseSample{12.0, 4, 2.0, 16});
  EXPECT_EQ(*all_noise.noise_scale(), GradientNoiseScale::kMaxNoiseScale);
  GradientNoiseScale no_noise;  // S == L: tr = 0
  no_noise.update(NoiseSample{3.0, 4, 3.0, 16});
  EXPECT_EQ(*no_noise.noise_scale(), 0.0);

  GradientNoiseScale resumed(0.95);
  resumed.restore(gns.state());
  gns.update(NoiseSample{9.0, 4, 5.0, 16});
  resumed.update(NoiseSample{9.0, 4, 5.0, 16});
  EXPECT_EQ(*resumed.noise_scale(), *gns.noise_scale());
  EXPECT_THROW(GradientNoiseScale(1.0), InvalidArgument);
}

TEST(StatisticalEfficiency, RelativeToTheBaseBatch) {
  EXPECT_DOUBLE_EQ(statistical_efficiency(74, 16, 16), 1.0);
  EXPECT_DOUBLE_EQ(statistical_efficiency(74, 32, 16), 90.0 / 106.0);
  EXPECT_NEAR(statistical_efficiency(1e9, 256, 8), 1.0, 1e-6);
  EXPECT_NEAR(statistical_efficiency(0, 256, 8), 8.0 / 256.0, 1e-12);
}

TEST(StepTime, LeastSquaresUnderTheConstraints) {
  std::vector<StepObservation> obs;
  for (uint64_t b : {8, 16, 32, 64}) obs.push_back({b, 0.5 + 0.01 * b});
  auto f = fit_step_time(obs);
  ASSERT_TRUE(f);
  EXPECT_NEAR(f->fixed_seconds, 0.5, 1e-12);
  EXPECT_NEAR(f->seconds_per_sample, 0.01, 1e-12);
  EXPECT_EQ(f->batch_sizes, 4);

  // The free fit has a < 0: a = 0 and c = sum B t / sum B^2.
  f = fit_step_time(std::vector<StepObservation>{{10, 0.5}, {20, 1.5}});
  EXPECT_EQ(f->fixed_seconds, 0.0);
  EXPECT_NEAR(f->seconds_per_sample, (5.0 + 30.0) / 500.0, 1e-12);

  // Time falls with B (noise): c stays > 0, the fit goes through the means.
  f = fit_step_time(std::vector<StepObservation>{{10, 1.2}, {20, 1.0}});
  EXPECT_GT(f->seconds_per_sample, 0.0);
  EXPECT_NEAR(f->seconds(15), 1.1, 1e-12);

  // One B: proportional, or a = the measured fixed part.
  f = fit_step_time(std::vector<StepObservation>{{16, 0.8}, {16, 1.2}});
  EXPECT_EQ(f->batch_sizes, 1);
  EXPECT_EQ(f->fixed_seconds, 0.0);
  EXPECT_NEAR(f->seconds_per_sample, 1.0 / 16, 1e-12);
  f = fit_step_time(std::vector<StepObservation>{{16, 1.0, 0.2}});
  EXPECT_NEAR(f->fixed_seconds, 0.2, 1e-12);
  EXPECT_NEAR(f->seconds_per_sample, 0.05, 1e-12);
  EXPECT_FALSE(fit_step_time(std::vector<StepObservation>{}));
}

TEST(StepTime, ModelKeepsRecentStepsPerBatch) {
  StepTimeModel m(4, 2);
  EXPECT_FALSE(m.fit());
  EXPECT_FALSE(m.observe(16, std::numeric_limits<double>::quiet_NaN()));
  EXPECT_FALSE(m.observe(0, 1.0));
  for (int i = 0; i < 10; ++i) m.observe(16, 9.0);  // old times at 16, pushed out below
  for (int i = 0; i < 4; ++i) m.observe(16, 0.5 + 0.01 * 16);
  for (int i = 0; i < 20; ++i) m.observe(32, 0.5 + 0.01 * 32);
  EXPECT_EQ(m.observations(), 8u);
  EXPECT_NEAR(m.fit()->fixed_seconds, 0.5, 1e-9);
  m.observe(64, 0.5 + 0.01 * 64);  // a third B evicts 16, the least recently seen
  EXPECT_EQ(m.observations(), 5u);
  EXPECT_NEAR(m.fit()->seconds_per_sample, 0.01, 1e-9);
}

// T(B) = 0.5 s + 10 ms per sample.
const StepTimeFit kFit{0.5, 0.01, 2};

TEST(GoodputPolicy, GridWithinTheRangeAndTheWorld) {
  EXPECT_EQ(GoodputPolicy({8, 64, 1, 0.05}).candidates(),
            (std::vector<uint64_t>{8, 12, 16, 24, 32, 48, 64}));
  EXPECT_EQ(GoodputPolicy({5, 20, 1, 0.05}).candidates(),
            (std::vector<uint64_t>{5, 6, 8, 12, 16, 20}));
  const GoodputPolicy world(GoodputSettings{8, 64, 20, 0.05});
  EXPECT_EQ(world.candidates().front(), 20u);  // B >= world size
  EXPECT_EQ(world.legal_batch(8), 20u);
  EXPECT_EQ(GoodputPolicy({8, 16, 24, 0.05}).candidates(), (std::vector<uint64_t>{24}));
  EXPECT_THROW(GoodputPolicy({16, 8, 1, 0.05}), InvalidArgument);
}

TEST(GoodputPolicy, LargeNoiseScaleMovesUpSmallMovesDown) {
  const GoodputPolicy policy({16, 256, 4, 0.05});
  const GoodputDecision up = policy.decide(16, 10000, kFit);
  EXPECT_GT(up.batch, 16u);
  EXPECT_GT(up.gain(), 0.05);
  EXPECT_NEAR(up.goodput, goodput(static_cast<double>(up.batch), 10000, 16, kFit), 1e-12);
  EXPECT_EQ(up.batch, 256u);  // E ~ 1 everywhere: throughput decides

  const GoodputDecision down = policy.decide(128, 1, kFit);
  EXPECT_EQ(down.batch, 16u);
  EXPECT_GT(down.gain(), 0.05);
  EXPECT_EQ(policy.decide(16, 1, kFit).batch, 16u);  // stays at min

  // In between, the optimum maximises B / (a + c B) * (Bn + B0) / (Bn + B): for
  // B_noise = 64 it is at B* = sqrt(a Bn / c) = sqrt(0.5 * 64 / 0.01) ~ 57 -> 48 or 64.
  const GoodputDecision mid = policy.decide(16, 64, kFit);
  EXPECT_TRUE(mid.batch == 48 || mid.batch == 64) << mid.describe();
}

TEST(GoodputPolicy, HysteresisHoldsSmallGains) {
  // Time proportional to B plus a small fixed cost and a large noise scale: goodput
  // barely grows with B.
  const StepTimeFit flat{0.01, 0.01, 2};
  const GoodputPolicy strict({16, 64, 1, 0.05});
  const GoodputDecision hold = strict.decide(32, 1e6, flat);
  EXPECT_FALSE(hold.changed());
  EXPECT_EQ(hold.best_batch, 64u);
  EXPECT_GT(hold.best_goodput, hold.current_goodput);
  EXPECT_LT(hold.best_goodput, 1.05 * hold.current_goodput);
  EXPECT_EQ(GoodputPolicy({16, 64, 1, 0.0}).decide(32, 1e6, flat).batch, 64u);
  // Outside the range (the world grew): move whatever the gain.
  EXPECT_EQ(GoodputPolicy({16, 64, 40, 0.05}).decide(32, 1e6, flat).batch, 64u);
  EXPECT_THROW(strict.decide(32, -1, flat), InvalidArgument);
  EXPECT_THROW(strict.decide(32, 1, StepTimeFit{0, 0, 1}), InvalidArgument);
}

TEST(GoodputPolicy, DescribeAndCost) {
  const GoodputPolicy policy({16, 256, 1, 0.05});
  const GoodputDecision d = policy.decide(16, 74, kFit);
  ASSERT_TRUE(d.changed());
  const std::string want = "global batch 16 -> " + std::to_string(d.batch) + ": noise scale 74";
  EXPECT_EQ(d.describe().rfind(want, 0), 0u) << d.describe();
  EXPECT_NE(d.describe().find("goodput +"), std::string::npos) << d.describe();
  const GoodputDecision h = policy.decide(16, 0.5, kFit);
  EXPECT_EQ(h.describe(), "global batch 16 held: noise scale 0.5, efficiency 1.00");

  const auto start = std::chrono::steady_clock::now();
  double sink = 0;
  for (int i = 0; i < 1000; ++i) sink += policy.decide(16 + i % 200, i, kFit).goodput;
  const double each =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 1000;
  EXPECT_GT(sink, 0);
  EXPECT_LT(each, 1e-3);  // "well under 10 ms"; it is microseconds
}

TEST(LrScaling, RulesAgainstHandValues) {
  // B0 = 8, B = 32: S = 4.
  EXPECT_DOUBLE_EQ(lr_gain(LrScaling::kLinear, 32, 8, 0), 4.0);
  EXPECT_DOUBLE_EQ(lr_gain(LrScaling::kSqrt, 32, 8, 0), 2.0);
  // B_noise = 8: (8/8 + 1) / (8/32 + 1) = 2 / 1.25.
  EXPECT_DOUBLE_EQ(lr_gain(LrScaling::kAdaScale, 32, 8, 8), 1.6);
  // B_noise = 24: (3 + 1) / (0.75 + 1) = 16 / 7; the paper's form with sigma^2 = 24/8
  // (mu^2 = 1): (3 + 1) / (3 / 4 + 1).
  EXPECT_DOUBLE_EQ(adascale_gain(32, 8, 24), 16.0 / 7.0);
  EXPECT_NEAR(adascale_gain(32, 8, 1e-9), 1.0, 1e-9);  // no noise: no gain
  EXPECT_NEAR(adascale_gain(32, 8, 1e12), 4.0, 1e-9);  // all noise: linear
  EXPECT_EQ(adascale_gain(32, 8, std::numeric_limits<double>::quiet_NaN()), 1.0);
  EXPECT_EQ(parse_lr_scaling("adascale"), LrScaling::kAdaScale);
  EXPECT_THROW(parse_lr_scaling("cubic"), ConfigError);
}

TEST(LrScaling, ProgressAdvancesInBaseSteps) {
  ScaledProgress ada, lin;
  for (int i = 0; i < 10; ++i) {
    EXPECT_DOUBLE_EQ(ada.advance(LrScaling::kAdaScale, 32, 8, 8), 1.6);
    EXPECT_DOUBLE_EQ(lin.advance(LrScaling::kSqrt, 32, 8, 8), 2.0);
  }
  EXPECT_NEAR(ada.progress, 16.0, 1e-12);  // tau += r
  EXPECT_NEAR(lin.progress, 40.0, 1e-12);  // samples / B0
}

}  // namespace
}  // namespace etr
