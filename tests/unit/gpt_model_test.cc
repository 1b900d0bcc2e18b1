// The whole GPT-2 model's gradient against central finite differences, in double
// precision, on a tiny configuration: every parameter (padding rows of the vocabulary
// included, whose gradient must be 0), so a wrong index anywhere in a layer's backward
// or in the model's plumbing (residual stream, tied embedding) fails here.
//
// Tolerance: |analytic - numeric| <= 1e-6 * max(1, |analytic|); step h = 1e-5. In double
// the central difference's truncation error is O(h^2 |f'''|) ~ 1e-10 and rounding
// ~ 1e-16 / h ~ 1e-11, far below the tolerance; a real bug gives errors of order 1.
#include "examples/gpt/gpt_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/error.h"
#include "runtime/host_allocator.h"
#include "runtime/kernels/cpu/threads.h"

namespace etr::gpt {
namespace {

GptConfig tiny() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 8;
  c.seq_len = 6;
  c.vocab_size = 11;
  return c;
}

struct Data {
  std::vector<int32_t> tokens, targets;
};

Data random_data(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
  Data d;
  for (int64_t i = 0; i < B * T; ++i) {
    d.tokens.push_back(tok(rng));
    d.targets.push_back(tok(rng));
  }
  return d;
}

TEST(GptModel, GradientOfEveryParameterMatchesFiniteDifferences) {
  cpu::set_num_threads(1);
  HostAllocator alloc;
  const GptConfig c = tiny();
  GptModel<double> model(c, alloc);
  model.init(1234);
  // Non-trivial LayerNorm parameters and biases, so their gradients are exercised.
  std::mt19937_64 rng(99);
  std::normal_distribution<double> noise(0.0, 0.1);
  for (const TensorEntry& e : model.layout().entries()) {
    if (e.name == "wte.weight") continue;
    for (int64_t i = 0; i < e.numel(); ++i) model.params()[e.offset + i] += noise(rng);
  }
  const int64_t B = 2, T = 5;
  model.plan(B, T);
  Data d = random_data(B, T, c.vocab_size, 7);
  Batch train{d.tokens.data(), d.targets.data(), B, T, 1.0 / static_cast<double>(B * T)};
  Batch eval = train;
  eval.dloss = 0;

  model.zero_grads();
  const double loss = model.forward(train);
  model.backward(train);
  std::vector<double> analytic(model.grads(), model.grads() + model.layout().numel());
  EXPECT_TRUE(std::isfinite(loss));

  const double h = 1e-5;
  int checked = 0, bad = 0;
  for (const TensorEntry& e : model.layout().entries()) {
    for (int64_t i = 0; i < e.numel(); ++i) {
      double& p = model.params()[e.offset + i];
      const double saved = p;
      p = saved + h;
      const double up = model.forward(eval);
      p = saved - h;
      const double down = model.forward(eval);
      p = saved;
      const double numeric = (up - down) / (2 * h);
      const double a = analytic[e.offset + i];
      ++checked;
      if (std::fabs(a - numeric) > 1e-6 * std::max(1.0, std::fabs(a))) {
        if (++bad <= 10) {
          ADD_FAILURE() << e.name << "[" << i << "]: analytic " << a << " vs numeric " << numeric;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "of " << checked << " parameters";
  EXPECT_EQ(checked, model.layout().param_count());
}

TEST(GptModel, FloatModelMatchesDoubleModel) {
  // The same weights in float and double: loss and gradients agree to float precision.
  HostAllocator alloc;
  const GptConfig c = tiny();
  GptModel<double> md(c, alloc);
  GptModel<float> mf(c, alloc);
  md.init(5);
  mf.init(5);
  const int64_t B = 3, T = 6;
  md.plan(B, T);
  mf.plan(B, T);
  Data d = random_data(B, T, c.vocab_size, 8);
  Batch b{d.tokens.data(), d.targets.data(), B, T, 1.0 / static_cast<double>(B * T)};
  md.zero_grads();
  mf.zero_grads();
  const double ld = md.forward(b), lf = mf.forward(b);
  md.backward(b);
  mf.backward(b);
  EXPECT_NEAR(ld, lf, 1e-5 * std::fabs(ld));
  double max_err = 0, max_g = 0;
  for (int64_t i = 0; i < md.layout().numel(); ++i) {
    max_err = std::max(max_err, std::fabs(md.grads()[i] - mf.grads()[i]));
    max_g = std::max(max_g, std::fabs(md.grads()[i]));
  }
  EXPECT_LE(max_err, 1e-4 * max_g) << "largest gradient " << max_g;
}

TEST(GptModel, InitialLossIsNearLogVocab) {
  // With N(0, 0.02) weights the logits are near 0: the loss is about ln(V).
  HostAllocator alloc;
  GptConfig c = tiny();
  c.vocab_size = 256;
  c.d_model = 32;
  c.seq_len = 16;
  GptModel<float> m(c, alloc);
  m.init(1);
  m.plan(4, 16);
  Data d = random_data(4, 16, c.vocab_size, 9);
  Batch b{d.tokens.data(), d.targets.data(), 4, 16, 0};
  EXPECT_NEAR(m.forward(b), std::log(256.0), 0.1);
}

// The sample standard deviation of the initial weights against the std asked for (the
// trainer passes model.init_std): 8192 draws of wte give it within 3% (its sampling error
// is 1/sqrt(2 n) = 0.8%); the output projections are scaled by 1/sqrt(2 n_layer).
TEST(GptModel, InitialWeightsFollowTheStdAskedFor) {
  HostAllocator alloc;
  GptConfig c = tiny();
  c.n_layer = 2;
  c.vocab_size = 256;
  c.d_model = 32;
  auto sample_std = [](const float* p, int64_t n) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i) sum += p[i], sq += double(p[i]) * p[i];
    const double mean = sum / static_cast<double>(n);
    return std::sqrt(sq / static_cast<double>(n) - mean * mean);
  };
  for (double want : {0.02, 0.05, 0.3}) {
    GptModel<float> m(c, alloc);
    m.init(7, want);
    const TensorEntry* wte = m.layout().find("wte.weight");
    const TensorEntry* proj = m.layout().find("h.1.mlp.c_proj.weight");
    ASSERT_NE(wte, nullptr);
    ASSERT_NE(proj, nullptr);
    EXPECT_NEAR(sample_std(m.params() + wte->offset, c.vocab_size * c.d_model), want, 0.03 * want);
    EXPECT_NEAR(sample_std(m.params() + proj->offset, proj->numel()), want / 2, 0.03 * want / 2);
  }
  GptModel<float> m(c, alloc);
  EXPECT_THROW(m.init(1, 0.0), InvalidArgument);
  EXPECT_THROW(m.init(1, std::nan("")), InvalidArgument);
}

TEST(GptModel, PlannedMemoryComesFromTheBudget) {
  GptConfig c = tiny();
  HostAllocator alloc;
  GptModel<float> m(c, alloc);
  const size_t need = m.activation_bytes(64, 6);
  alloc.set_budget(alloc.stats().in_use + need - 1);
  EXPECT_THROW(m.plan(64, 6), OutOfMemory);
  alloc.set_budget(alloc.stats().in_use + need);
  EXPECT_NO_THROW(m.plan(64, 6));
}

TEST(GptModel, RejectsImpossibleShapes) {
  HostAllocator alloc;
  GptConfig c = tiny();
  c.d_model = 9;  // not a multiple of n_head = 2
  EXPECT_THROW(GptModel<float>(c, alloc), ConfigError);
  GptModel<float> m(tiny(), alloc);
  EXPECT_THROW(m.plan(1, 7), ConfigError);  // longer than seq_len
}

}  // namespace
}  // namespace etr::gpt
