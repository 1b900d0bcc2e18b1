// AdamW, gradient clipping and the learning-rate schedule against double-precision
// references written out here from the formulas (PyTorch's torch.optim.AdamW).
// Tolerance: 1e-6 relative for the f32 update over 20 steps.
#include "runtime/adamw.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace etr {
namespace {

TEST(AdamW, MatchesADoubleReferenceWithDecayOnlyOnMarkedTensors) {
  ParamLayout layout;
  layout.add("w", Shape{7, 3}, 0, true);    // decayed
  layout.add("b", Shape{5}, 0, false);      // not
  layout.add("w2", Shape{4, 4}, 1, true);   // decayed
  const int64_t n = layout.numel();
  std::mt19937_64 rng(3);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<float> p(n), grad(n), m(n, 0), v(n, 0);
  std::vector<double> pr(n), mr(n, 0), vr(n, 0);
  for (int64_t i = 0; i < n; ++i) pr[i] = p[i] = static_cast<float>(g(rng));
  std::vector<bool> decayed(n, false);
  for (const TensorEntry& e : layout.entries())
    for (int64_t i = 0; i < e.numel(); ++i) decayed[e.offset + i] = e.weight_decay;

  AdamWOptions o;
  o.weight_decay = 0.1;
  AdamW opt(layout);
  for (int t = 1; t <= 20; ++t) {
    for (int64_t i = 0; i < n; ++i) grad[i] = static_cast<float>(g(rng));
    const double lr = 1e-2;
    opt.step(p.data(), grad.data(), m.data(), v.data(), 0, n, t, lr, o);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = grad[i];
      mr[i] = o.beta1 * mr[i] + (1 - o.beta1) * gi;
      vr[i] = o.beta2 * vr[i] + (1 - o.beta2) * gi * gi;
      const double mhat = mr[i] / (1 - std::pow(o.beta1, t));
      const double vhat = vr[i] / (1 - std::pow(o.beta2, t));
      // PyTorch: p *= 1 - lr wd, then p -= lr mhat / (sqrt(vhat) + eps): the same.
      const double wd = decayed[i] ? o.weight_decay : 0.0;
      pr[i] -= lr * (mhat / (std::sqrt(vhat) + o.eps) + wd * pr[i]);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(p[i], pr[i], 1e-5 * std::max(1.0, std::fabs(pr[i]))) << "element " << i;
  }
}

TEST(AdamW, UpdatingInRangesEqualsOneUpdate) {
  // A ZeRO shard updates a range; the ranges together must equal the whole update.
  ParamLayout layout;
  layout.add("w", Shape{10, 10}, 0, true);
  layout.add("b", Shape{10}, 0, false);
  const int64_t n = layout.numel();
  std::vector<float> p1(n), p2(n), g(n), m1(n, 0), v1(n, 0), m2(n, 0), v2(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    p1[i] = p2[i] = 0.01f * static_cast<float>(i % 17);
    g[i] = 0.1f * static_cast<float>((i * 7) % 13) - 0.6f;
  }
  AdamW opt(layout);
  AdamWOptions o;
  opt.step(p1.data(), g.data(), m1.data(), v1.data(), 0, n, 1, 1e-3, o);
  for (int64_t b = 0; b < n; b += 37) {
    opt.step(p2.data(), g.data(), m2.data(), v2.data(), b, std::min(n, b + 37), 1, 1e-3, o);
  }
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(m1, m2);
}

TEST(AdamW, UpdateRangeWithStorageForTheRangeOnlyEqualsAFullStepBitwise) {
  // The storage a FlatState gives for a held range: element 0 is layout element `begin`.
  // The pieces cut through decayed and undecayed tensors and through padding.
  ParamLayout layout;
  layout.add("w", Shape{9, 5}, 0, true);
  layout.add("b", Shape{7}, 0, false);
  layout.add("w2", Shape{6, 6}, 1, true);
  layout.add("ln", Shape{3}, 1, false);
  const int64_t n = layout.numel();
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p(n), g(n), m(n, 0), v(n, 0);
  for (int64_t i = 0; i < n; ++i) p[i] = normal(rng);
  std::vector<float> p_full = p, m_full = m, v_full = v;
  AdamW opt(layout);
  AdamWOptions o;
  const std::vector<int64_t> cuts = {0, 13, 44, 45, 52, 70, n};
  for (int t = 1; t <= 3; ++t) {
    for (int64_t i = 0; i < n; ++i) g[i] = normal(rng);
    opt.step(p_full.data(), g.data(), m_full.data(), v_full.data(), 0, n, t, 1e-2, o);
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      const int64_t b = cuts[c], e = cuts[c + 1];
      std::vector<float> ps(p.begin() + b, p.begin() + e), gs(g.begin() + b, g.begin() + e),
          ms(m.begin() + b, m.begin() + e), vs(v.begin() + b, v.begin() + e);
      opt.update_range(b, e, ps.data(), gs.data(), ms.data(), vs.data(), t, 1e-2, o);
      std::copy(ps.begin(), ps.end(), p.begin() + b);
      std::copy(ms.begin(), ms.end(), m.begin() + b);
      std::copy(vs.begin(), vs.end(), v.begin() + b);
    }
  }
  EXPECT_EQ(p, p_full);
  EXPECT_EQ(m, m_full);
  EXPECT_EQ(v, v_full);
  EXPECT_NE(p_full[0], 0.0f);
}

TEST(GradClip, NormAndClipping) {
  std::vector<float> g = {3, 4, 0, 0};
  EXPECT_DOUBLE_EQ(grad_norm(g.data(), 4), 5.0);
  EXPECT_DOUBLE_EQ(clip_grad_norm(g.data(), 4, 5.0, 10.0), 1.0);
  EXPECT_EQ(g[0], 3.0f);
  const double s = clip_grad_norm(g.data(), 4, 5.0, 1.0);
  EXPECT_NEAR(s, 0.2, 1e-6);
  EXPECT_NEAR(grad_norm(g.data(), 4), 1.0, 1e-6);
}

TEST(Schedule, WarmupThenCosineToTheFloor) {
  const double lr = 1e-3;
  EXPECT_DOUBLE_EQ(learning_rate(0, lr, 10, 100, 0.1), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(9, lr, 10, 100, 0.1), 1e-3);
  EXPECT_NEAR(learning_rate(10, lr, 10, 100, 0.1), 1e-3, 1e-12);
  EXPECT_NEAR(learning_rate(55, lr, 10, 100, 0.1), 1e-3 * (0.1 + 0.9 * 0.5), 1e-12);
  EXPECT_NEAR(learning_rate(100, lr, 10, 100, 0.1), 1e-4, 1e-15);
  EXPECT_NEAR(learning_rate(500, lr, 10, 100, 0.1), 1e-4, 1e-15);
  double prev = 1;
  for (int s = 10; s <= 100; ++s) {
    const double x = learning_rate(s, lr, 10, 100, 0.1);
    EXPECT_LE(x, prev + 1e-15);
    prev = x;
  }
}

// A step from a crafted checkpoint (2^63 read into int64 wraps to INT64_MIN) once gave a
// rate of -4.6e15: any step is a rate in [0, lr] (warmup starts near 0).
TEST(Schedule, ExtremeStepsGiveARateOfTheSchedule) {
  const double lr = 1e-3;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  EXPECT_DOUBLE_EQ(learning_rate(kMax, lr, 10, 100, 0.1), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(kMax, lr, 10, kMax, 0.1), 1e-4);
  const double progress = static_cast<double>(kMax - 1) / static_cast<double>(kMax);
  EXPECT_DOUBLE_EQ(learning_rate(kMax - 1, lr, 0, kMax, 0.1),
                   lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * progress))));
  EXPECT_DOUBLE_EQ(learning_rate(kMin, lr, 10, 100, 0.1), learning_rate(0, lr, 10, 100, 0.1));
  EXPECT_DOUBLE_EQ(learning_rate(-1, lr, 0, 100, 0.1), lr);
  for (int64_t s : {kMin, kMin + 1, int64_t{-1}, kMax - 1, kMax}) {
    for (int64_t warmup : {int64_t{0}, int64_t{10}, kMax}) {
      const double x = learning_rate(s, lr, warmup, kMax, 0.1);
      EXPECT_GE(x, 0.0) << s << " " << warmup;
      EXPECT_LE(x, lr * (1 + 1e-12)) << s << " " << warmup;
    }
  }
}

}  // namespace
}  // namespace etr
