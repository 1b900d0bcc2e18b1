// Mixed precision on the host (runtime.precision bf16): the example GPT-2 as a
// LayerStack<bf16> (bf16 activations and parameters, fp32 gradients, LayerNorm statistics
// and losses; the CPU's bf16 kernel set, runtime/kernels/cpu/bf16_reference.h) against
// the same model in double on the same bf16-rounded parameters:
// - the loss within 1e-2 relative and every gradient within 3e-2 relative L2, at shapes
//   where N x C and N are odd (the fp32 statistics among bf16 activations must be aligned:
//   UBSan checks it in the sanitizer run);
// - recomputation gives bitwise the same losses and gradients in bf16 too;
// - the plan's bytes: a bf16 stack needs about half a float one's activations;
// - AdamW's bf16 copy (DeviceOps::adamw_step, to_bf16) is the f32 result rounded to
//   nearest even, bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "examples/gpt/gpt_model.h"
#include "runtime/dtype.h"
#include "runtime/host_allocator.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/layer_stack.h"

namespace etr {
namespace {

gpt::GptConfig config() {
  gpt::GptConfig c;
  c.n_layer = 2;
  c.n_head = 3;
  c.d_model = 45;  // odd: N x C odd below
  c.seq_len = 9;
  c.vocab_size = 67;
  return c;
}

constexpr int64_t kB = 3, kT = 9;  // N = 27

double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

struct Tokens {
  std::vector<int32_t> in, target;
};

Tokens tokens(const gpt::GptConfig& c) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size) - 1);
  Tokens t;
  for (int64_t i = 0; i < kB * kT; ++i) {
    t.in.push_back(tok(rng));
    t.target.push_back(tok(rng));
  }
  return t;
}

// Loss and gradients (as double) of one forward and backward of `stack` bound to `params`.
template <typename Real>
double run(LayerStack<Real>& stack, Real* params, std::vector<accum_t<Real>>& grads,
           const Tokens& t, bool recompute = false) {
  HostAllocator alloc;
  grads.assign(static_cast<size_t>(stack.layout().numel()), accum_t<Real>(0));
  stack.bind(params, grads.data());
  stack.plan(alloc, kB, kT, 1, false, recompute);
  const Batch b{t.in.data(), t.target.data(), kB, kT, 1.0 / static_cast<double>(kB * kT)};
  const double loss = stack.forward(b);
  stack.backward(b);
  stack.release();
  return loss;
}

struct Models {
  std::vector<bf16> p16;
  std::vector<double> p64;
};

Models rounded_params(const gpt::GptConfig& c, const ParamLayout& layout) {
  std::vector<double> init(static_cast<size_t>(layout.numel()));
  gpt::init_params<double>(c, layout, init.data(), 11, 0.2);  // wide: activations of size
  Models m;
  for (double v : init) {
    m.p16.push_back(bf16(static_cast<float>(v)));
    m.p64.push_back(static_cast<float>(m.p16.back()));
  }
  return m;
}

TEST(MixedPrecision, Bf16StackFollowsDoubleOnTheSameRoundedParameters) {
  const gpt::GptConfig c = config();
  auto s16 = gpt::build_stack<bf16>(c);
  auto s64 = gpt::build_stack<double>(c);
  ASSERT_EQ(s16->layout().numel(), s64->layout().numel());
  Models m = rounded_params(c, s16->layout());
  const Tokens t = tokens(c);
  std::vector<float> g16;
  std::vector<double> g64;
  const double l16 = run(*s16, m.p16.data(), g16, t);
  const double l64 = run(*s64, m.p64.data(), g64, t);
  ASSERT_TRUE(std::isfinite(l16));
  EXPECT_NEAR(l16, l64, 1e-2 * l64);
  // Per tensor, so that a small one's error is not hidden by a large one.
  for (const TensorEntry& e : s16->layout().entries()) {
    std::vector<double> got, want;
    for (int64_t i = e.offset; i < e.offset + e.numel(); ++i) {
      got.push_back(g16[static_cast<size_t>(i)]);
      want.push_back(g64[static_cast<size_t>(i)]);
    }
    double norm = 0;
    for (double w : want) norm += w * w;
    if (norm == 0) continue;  // wte's padding rows, biases the loss does not reach
    EXPECT_LT(rel_l2(got, want), 3e-2) << e.name;
  }
}

TEST(MixedPrecision, RecomputationIsBitwiseInBf16) {
  const gpt::GptConfig c = config();
  auto a = gpt::build_stack<bf16>(c);
  auto b = gpt::build_stack<bf16>(c);
  Models m = rounded_params(c, a->layout());
  const Tokens t = tokens(c);
  std::vector<float> ga, gb;
  const double la = run(*a, m.p16.data(), ga, t, false);
  const double lb = run(*b, m.p16.data(), gb, t, true);
  EXPECT_EQ(la, lb);
  ASSERT_EQ(ga.size(), gb.size());
  EXPECT_EQ(0, std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float)));
}

TEST(MixedPrecision, ActivationsTakeAboutHalfTheBytes) {
  gpt::GptConfig c = config();
  c.d_model = 48;
  c.n_head = 4;
  auto s16 = gpt::build_stack<bf16>(c);
  auto s32 = gpt::build_stack<float>(c);
  const double ratio = static_cast<double>(s16->activation_bytes(8, 9)) /
                       static_cast<double>(s32->activation_bytes(8, 9));
  // Half, plus the fp32 statistics and losses (3 N + 4 N per block of the float count).
  EXPECT_GT(ratio, 0.5);
  EXPECT_LT(ratio, 0.56);
  HostAllocator alloc;
  s16->plan(alloc, 8, 9);
  EXPECT_EQ(alloc.stats().in_use, s16->activation_bytes(8, 9));
  s16->release();
}

// numel_as and ActivationCarver: a no-op for float and double (the fp32 plan unchanged);
// under bf16 every array rounded up to 16 bytes, so fp32 arrays among bf16 ones are aligned.
TEST(MixedPrecision, CarvingKeepsFloatAsItWasAndAlignsBf16) {
  EXPECT_EQ((numel_as<float>(37)), 37);
  EXPECT_EQ((numel_as<double>(37)), 37);
  EXPECT_EQ((numel_as<bf16>(37)), 40);         // 74 bytes -> 80
  EXPECT_EQ((numel_as<bf16, float>(37)), 80);  // 148 bytes -> 160
  EXPECT_EQ((numel_as<bf16>(8)), 8);
  EXPECT_EQ((numel_as<bf16>(0)), 0);
  alignas(16) bf16 buffer[256];
  ActivationCarver<bf16> c(buffer);
  bf16* a = c.take(37);
  float* m = c.take<float>(5);
  bf16* b = c.take(3);
  EXPECT_EQ(reinterpret_cast<char*>(m) - reinterpret_cast<char*>(a), 80);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m) % 16, 0u);
  EXPECT_EQ(reinterpret_cast<char*>(b) - reinterpret_cast<char*>(m), 32);
  float fbuf[64];
  ActivationCarver<float> f(fbuf);
  float* x = f.take(37);
  float* y = f.take(5);
  EXPECT_EQ(y - x, 37);
}

TEST(MixedPrecision, AdamWWritesTheRoundedCopyInTheSamePass) {
  ParamLayout layout;
  layout.add("w", Shape{37}, 0, true);
  layout.add("b", Shape{5}, 0, false);
  const size_t n = static_cast<size_t>(layout.numel());
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    p[i] = normal(rng);
    g[i] = normal(rng);
  }
  std::vector<float> p_ref = p, m_ref = m, v_ref = v;
  const AdamWOptions o{1e-2, 0.9, 0.95, 1e-8, 0.1};
  AdamW(layout).step(p_ref.data(), g.data(), m_ref.data(), v_ref.data(), 0, layout.numel(), 1,
                     1e-2, o);
  std::vector<uint16_t> copy(n, 0);
  const DeviceOps& ops = device_ops(Device::cpu());
  ops.adamw_step(layout, p.data(), g.data(), m.data(), v.data(), copy.data(), 1, 1e-2, o, nullptr);
  EXPECT_EQ(p, p_ref) << "the f32 master as without the copy";
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(copy[i], f32_to_bf16(p[i])) << i;
  std::vector<uint16_t> again(n, 0);
  ops.to_bf16(again.data(), p.data(), layout.numel(), nullptr);
  EXPECT_EQ(again, copy);
}

}  // namespace
}  // namespace etr
