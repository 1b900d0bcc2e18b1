// cuda::adamw_update, grad_norm_squared and clip_grad_norm against etr::AdamW,
// etr::grad_norm and etr::clip_grad_norm (runtime/adamw.h) on the CPU.
//
// AdamW: a layout of decayed and undecayed tensors (with the alignment padding between
// them, which etr::AdamW updates undecayed), split into ranges by the caller as the header
// says; steps t = 1..3 with fresh gradients and a changing rate; params, m and v within
// 1e-6 relative L2 after every step. The norm: against a compensated long double sum within
// 1e-12 relative, bitwise identical run to run. Clipping: bitwise equal to the CPU given the
// same squared norm, including norm == max_norm and norm < max_norm (no change) and
// max_norm <= 0 (no clipping). Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/kernel_test_util.h"
#include "runtime/adamw.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/adamw.h"
#include "runtime/param_layout.h"
#include "runtime/tensor.h"

namespace etr {
namespace {

using testing::DeviceArray;
using testing::expect_close;
using testing::expect_same_bits;
using testing::random_floats;
using testing::stream;

// One step of the whole layout on the device (the library's split into runs).
void device_step(const ParamLayout& layout, float* p, const float* g, float* m, float* v, int64_t t,
                 double lr, const AdamWOptions& o) {
  cuda::adamw_step_layout(layout, p, g, m, v, t, lr, o, stream());
}

// Random moments: m in [-0.01, 0.01), v = m'^2 >= 0.
void random_moments(int64_t n, uint64_t seed, std::vector<float>& m, std::vector<float>& v) {
  m = random_floats(n, seed, 0.01f);
  v = random_floats(n, seed + 1, 0.01f);
  for (float& x : v) x *= x;
}

void check_adamw_steps(const ParamLayout& layout, uint64_t seed) {
  const int64_t n = layout.numel();
  AdamWOptions o;
  o.lr = 1e-3;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.eps = 1e-8;
  o.weight_decay = 0.1;
  const AdamW cpu_opt(layout);

  std::vector<float> p = random_floats(n, seed), m, v;
  random_moments(n, seed + 1, m, v);
  DeviceArray<float> d_p(p), d_m(m), d_v(v), d_g(n);
  for (int64_t t = 1; t <= 3; ++t) {
    const double lr = o.lr * static_cast<double>(t);  // a warm-up: the rate changes per step
    const std::vector<float> g = random_floats(n, seed + 10 + t);
    d_g.upload(g);
    cpu_opt.step(p.data(), g.data(), m.data(), v.data(), 0, n, t, lr, o);
    device_step(layout, d_p.data(), d_g.data(), d_m.data(), d_v.data(), t, lr, o);
    const std::string what = "n " + std::to_string(n) + " step " + std::to_string(t);
    expect_close(d_p.download(), p, 1e-6, what + ": params");
    expect_close(d_m.download(), m, 1e-6, what + ": m");
    expect_close(d_v.download(), v, 1e-6, what + ": v");
    expect_same_bits(d_g.download(), g, what + ": grads unchanged");
  }
}

TEST(CudaAdamW, MatchesCpuOverSteps) {
  ETR_REQUIRE_GPU();
  ParamLayout small;  // an undecayed tensor first, padding after each odd-sized tensor
  small.add("ln.weight", Shape{37}, 0, false);
  small.add("fc.weight", Shape{13, 29}, 0, true);
  small.add("fc.bias", Shape{72}, 0, false);
  check_adamw_steps(small, 101);

  ParamLayout large;  // beyond one launch's 8192 x 256 threads
  large.add("w1", Shape{300, 1001}, 0, true);
  large.add("b1", Shape{1001}, 0, false);
  large.add("w2", Shape{1001, 2777}, 1, true);
  large.add("ln", Shape{2777}, 1, false);
  check_adamw_steps(large, 202);
}

TEST(CudaAdamW, UpdateIsDeterministic) {
  ETR_REQUIRE_GPU();
  const int64_t n = 100003;
  const std::vector<float> p = random_floats(n, 1), g = random_floats(n, 2);
  std::vector<float> m, v;
  random_moments(n, 3, m, v);
  std::vector<float> first_p, first_m, first_v;
  for (int run = 0; run < 2; ++run) {
    DeviceArray<float> d_p(p), d_g(g), d_m(m), d_v(v);
    cuda::adamw_update(d_p.data(), d_g.data(), d_m.data(), d_v.data(), n, 2, 3e-4, 0.9, 0.95, 1e-8,
                       0.1, stream());
    if (run == 0) {
      first_p = d_p.download();
      first_m = d_m.download();
      first_v = d_v.download();
      continue;
    }
    expect_same_bits(d_p.download(), first_p, "params, second run");
    expect_same_bits(d_m.download(), first_m, "m, second run");
    expect_same_bits(d_v.download(), first_v, "v, second run");
  }
}

TEST(CudaAdamW, ZeroCountAndBadArguments) {
  ETR_REQUIRE_GPU();
  const std::vector<float> p = random_floats(8, 5), g = random_floats(8, 6);
  DeviceArray<float> d_p(p), d_g(g), d_m(p), d_v(g);
  cuda::adamw_update(d_p.data(), d_g.data(), d_m.data(), d_v.data(), 0, 1, 1e-3, 0.9, 0.95, 1e-8,
                     0.1, stream());
  cuda::clip_grad_norm(d_g.data(), 0, nullptr, 1.0, stream());
  expect_same_bits(d_p.download(), p, "params after n = 0");
  expect_same_bits(d_m.download(), p, "m after n = 0");
  expect_same_bits(d_v.download(), g, "v after n = 0");
  expect_same_bits(d_g.download(), g, "grads after n = 0");
  EXPECT_THROW(cuda::adamw_update(d_p.data(), d_g.data(), d_m.data(), d_v.data(), 8, 0, 1e-3, 0.9,
                                  0.95, 1e-8, 0.1, stream()),
               InvalidArgument);
  EXPECT_THROW(cuda::adamw_update(d_p.data(), d_g.data(), d_m.data(), d_v.data(), -1, 1, 1e-3, 0.9,
                                  0.95, 1e-8, 0.1, stream()),
               InvalidArgument);
  DeviceArray<double> d_ns(1);
  EXPECT_THROW(cuda::grad_norm_squared(d_ns.data(), d_g.data(), -1, stream()), InvalidArgument);
  EXPECT_THROW(cuda::clip_grad_norm(d_g.data(), -1, d_ns.data(), 1.0, stream()), InvalidArgument);
}

double device_norm_squared(const DeviceArray<float>& d_g, int64_t n) {
  DeviceArray<double> d_ns = DeviceArray<double>::poisoned(1);
  cuda::grad_norm_squared(d_ns.data(), d_g.data(), n, stream());
  return d_ns.download()[0];
}

TEST(CudaAdamW, GradNormSquaredIsAccurateAndDeterministic) {
  ETR_REQUIRE_GPU();
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{1000003}, int64_t{9000001}}) {
    const std::vector<float> g = random_floats(n, 31 + n, 3.0f);
    DeviceArray<float> d_g(g);
    const std::string what = "grad_norm_squared n " + std::to_string(n);
    const double got = device_norm_squared(d_g, n);
    const double want = static_cast<double>(testing::compensated_sum(g, /*squares=*/true));
    ASSERT_TRUE(std::isfinite(got)) << what;
    EXPECT_LE(std::fabs(got - want), 1e-12 * want) << what << ": got " << got << ", want " << want;
    const double cpu_norm = grad_norm(g.data(), n);
    EXPECT_LE(std::fabs(std::sqrt(got) - cpu_norm), 1e-10 * cpu_norm) << what << " vs grad_norm";
    for (int run = 0; run < 2; ++run) {
      const double again = device_norm_squared(d_g, n);
      EXPECT_EQ(std::memcmp(&again, &got, sizeof(double)), 0)
          << what << ": run " << run + 2 << " gave " << again << ", the first " << got;
    }
  }
  DeviceArray<float> d_g(random_floats(4, 37));
  EXPECT_EQ(device_norm_squared(d_g, 0), 0.0) << "the norm of nothing";
}

// Clips on the device from a device scalar and on the CPU from its square root; the
// scaled gradients must be the same bits.
void check_clip(const std::vector<float>& g, double norm_squared, double max_norm,
                const std::string& what) {
  const int64_t n = static_cast<int64_t>(g.size());
  std::vector<float> want = g;
  const double factor = clip_grad_norm(want.data(), n, std::sqrt(norm_squared), max_norm);
  DeviceArray<float> d_g(g);
  DeviceArray<double> d_ns(std::vector<double>{norm_squared});
  cuda::clip_grad_norm(d_g.data(), n, d_ns.data(), max_norm, stream());
  const std::vector<float> got = d_g.download();
  expect_same_bits(got, want, what);
  if (factor == 1.0) {
    expect_same_bits(got, g, what + ": unchanged");
  } else {
    double sq = 0;
    for (float x : got) sq += static_cast<double>(x) * x;
    EXPECT_NEAR(std::sqrt(sq), max_norm, 1e-5 * max_norm) << what << ": norm after clipping";
  }
}

TEST(CudaAdamW, ClipGradNormMatchesCpu) {
  ETR_REQUIRE_GPU();
  for (int64_t n : {int64_t{7}, int64_t{1000003}}) {
    const std::vector<float> g = random_floats(n, 41 + n, 2.0f);
    DeviceArray<float> d_g(g);
    const double ns = device_norm_squared(d_g, n);  // the step's scalar, read here to test
    const double norm = std::sqrt(ns);
    const std::string at = " n " + std::to_string(n);
    check_clip(g, ns, 0.5 * norm, "norm > max_norm" + at);
    check_clip(g, ns, 1e-3 * norm, "norm >> max_norm" + at);
    check_clip(g, ns, norm, "norm == max_norm" + at);
    check_clip(g, ns, 2.0 * norm, "norm < max_norm" + at);
    check_clip(g, ns, 0.0, "max_norm 0 (no clipping)" + at);
    check_clip(g, ns, -1.0, "max_norm < 0 (no clipping)" + at);
  }
}

}  // namespace
}  // namespace etr
