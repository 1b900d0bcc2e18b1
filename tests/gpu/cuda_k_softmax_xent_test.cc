// cuda::softmax_xent_forward and softmax_xent_forward_backward against the CPU kernels
// (float) on the same inputs: odd shapes, one larger, GPT-2's padded vocabulary (V = 50257,
// Vp = 50304), logits of magnitude up to 100, ignored positions, dlogits in a buffer of its
// own and in place over the logits. The padding columns of the logits hold NaN (never
// read); outputs start as NaN (poisoned). Relative L2 <= 1e-5; the padding and the ignored
// rows of dlogits, and the ignored losses, must be exactly +0. Skipped without a GPU.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gpu/kernel_test_util.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/softmax_xent.h"
#include "runtime/kernels/kernels.h"

namespace etr {
namespace {

using testing::DeviceArray;
using testing::expect_close;
using testing::expect_same_bits;
using testing::random_floats;
using testing::random_tokens;
using testing::stream;

struct XentCase {
  int64_t N, V, Vp;
  float scale;  // logits uniform in [-scale, scale)
};

std::string describe(const XentCase& c) {
  return "N " + std::to_string(c.N) + " V " + std::to_string(c.V) + " Vp " + std::to_string(c.Vp) +
         " scale " + std::to_string(c.scale);
}

// Real columns random, padding NaN: a kernel that reads the padding fails the comparison.
std::vector<float> make_logits(const XentCase& c, uint64_t seed) {
  std::vector<float> x = random_floats(c.N * c.Vp, seed, c.scale);
  for (int64_t n = 0; n < c.N; ++n) {
    for (int64_t v = c.V; v < c.Vp; ++v) x[n * c.Vp + v] = std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

// Random targets, with every fifth position ignored (-1, or -100 as PyTorch marks them).
std::vector<int32_t> make_targets(const XentCase& c, uint64_t seed) {
  std::vector<int32_t> t = random_tokens(c.N, c.V, seed);
  for (int64_t n = 0; n < c.N; ++n) {
    if (n % 5 == 2) t[n] = n % 2 ? -1 : -100;
  }
  return t;
}

float mean_dloss(const std::vector<int32_t>& targets) {
  int64_t kept = 0;
  for (int32_t t : targets) kept += t >= 0;
  return kept > 0 ? 1.0f / static_cast<float>(kept) : 1.0f;
}

bool is_plus_zero(float x) {
  return std::bit_cast<uint32_t>(x) == 0u;
}

// The padding columns of every row and the whole row of an ignored position are +0, and
// an ignored position's loss is +0.
void expect_zeros(const std::vector<float>& losses, const std::vector<float>& dlogits,
                  const std::vector<int32_t>& targets, const XentCase& c, const std::string& what) {
  int64_t bad = 0;
  for (int64_t n = 0; n < c.N; ++n) {
    const bool ignored = targets[n] < 0;
    if (ignored && !is_plus_zero(losses[n])) {
      ADD_FAILURE() << what << ": ignored position " << n << " has loss " << losses[n];
    }
    if (dlogits.empty()) continue;
    for (int64_t v = ignored ? 0 : c.V; v < c.Vp; ++v) {
      if (!is_plus_zero(dlogits[n * c.Vp + v]) && bad++ < 5) {
        ADD_FAILURE() << what << ": dlogits[" << n << ", " << v << "] is " << dlogits[n * c.Vp + v]
                      << ", not +0 (" << (ignored ? "ignored row" : "padding") << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << ": dlogits elements that should be exactly +0";
}

const XentCase kCases[] = {
    {111, 37, 37, 1.0f},        // B=3, T=37, no padding, fewer columns than threads
    {111, 997, 1000, 4.0f},     // odd vocabulary, odd padding
    {512, 2053, 2112, 2.0f},    // B=4, T=128
    {37, 300, 320, 100.0f},     // logits of magnitude 100
    {6, 50257, 50304, 100.0f},  // GPT-2's padded vocabulary
    {5, 50257, 50304, 1.0f},
};

TEST(CudaSoftmaxXent, ForwardMatchesCpu) {
  ETR_REQUIRE_GPU();
  uint64_t seed = 11;
  for (const XentCase& c : kCases) {
    const std::string what = "forward " + describe(c);
    const std::vector<float> logits = make_logits(c, ++seed);
    const std::vector<int32_t> targets = make_targets(c, ++seed);
    std::vector<float> want(c.N);
    cpu::softmax_xent_forward<float>(want.data(), logits.data(), targets.data(), c.N, c.V, c.Vp);

    DeviceArray<float> d_logits(logits), d_losses = DeviceArray<float>::poisoned(c.N);
    DeviceArray<int32_t> d_targets(targets);
    cuda::softmax_xent_forward(d_losses.data(), d_logits.data(), d_targets.data(), c.N, c.V, c.Vp,
                               stream());
    const std::vector<float> got = d_losses.download();
    expect_close(got, want, 1e-5, what);
    expect_zeros(got, {}, targets, c, what);
    expect_same_bits(d_logits.download(), logits, what + ": logits unchanged");
  }
}

// dlogits in a buffer of its own (poisoned) or in place over the logits.
void check_forward_backward(const XentCase& c, bool in_place, uint64_t seed) {
  const std::string what =
      std::string(in_place ? "in-place " : "") + "forward_backward " + describe(c);
  const std::vector<float> logits = make_logits(c, seed);
  const std::vector<int32_t> targets = make_targets(c, seed + 1);
  const float dloss = mean_dloss(targets);
  std::vector<float> want_losses(c.N), want_dlogits(c.N * c.Vp);
  cpu::softmax_xent_forward_backward<float>(want_losses.data(), want_dlogits.data(), logits.data(),
                                            targets.data(), dloss, c.N, c.V, c.Vp);

  DeviceArray<float> d_logits(logits), d_losses = DeviceArray<float>::poisoned(c.N);
  DeviceArray<float> d_dlogits = DeviceArray<float>::poisoned(in_place ? 0 : c.N * c.Vp);
  DeviceArray<int32_t> d_targets(targets);
  float* dlogits = in_place ? d_logits.data() : d_dlogits.data();
  cuda::softmax_xent_forward_backward(d_losses.data(), dlogits, d_logits.data(), d_targets.data(),
                                      dloss, c.N, c.V, c.Vp, stream());
  const std::vector<float> losses = d_losses.download();
  const std::vector<float> grads = in_place ? d_logits.download() : d_dlogits.download();
  expect_close(losses, want_losses, 1e-5, what + ": losses");
  expect_close(grads, want_dlogits, 1e-5, what + ": dlogits");
  expect_zeros(losses, grads, targets, c, what);
  if (!in_place) expect_same_bits(d_logits.download(), logits, what + ": logits unchanged");
}

TEST(CudaSoftmaxXent, ForwardBackwardMatchesCpu) {
  ETR_REQUIRE_GPU();
  uint64_t seed = 101;
  for (const XentCase& c : kCases) check_forward_backward(c, /*in_place=*/false, seed += 2);
}

TEST(CudaSoftmaxXent, ForwardBackwardInPlaceMatchesCpu) {
  ETR_REQUIRE_GPU();
  uint64_t seed = 201;
  for (const XentCase& c : kCases) check_forward_backward(c, /*in_place=*/true, seed += 2);
}

TEST(CudaSoftmaxXent, RepeatedRunsAreBitwiseIdentical) {
  ETR_REQUIRE_GPU();
  const XentCase c{7, 50257, 50304, 100.0f};
  const std::vector<float> logits = make_logits(c, 5);
  const std::vector<int32_t> targets = make_targets(c, 6);
  DeviceArray<int32_t> d_targets(targets);
  std::vector<float> first_losses, first_grads, first_forward;
  for (int run = 0; run < 3; ++run) {
    DeviceArray<float> d_logits(logits), d_losses = DeviceArray<float>::poisoned(c.N);
    DeviceArray<float> d_forward = DeviceArray<float>::poisoned(c.N);
    cuda::softmax_xent_forward(d_forward.data(), d_logits.data(), d_targets.data(), c.N, c.V, c.Vp,
                               stream());
    cuda::softmax_xent_forward_backward(d_losses.data(), d_logits.data(), d_logits.data(),
                                        d_targets.data(), 0.25f, c.N, c.V, c.Vp, stream());
    std::vector<float> losses = d_losses.download(), grads = d_logits.download(),
                       forward = d_forward.download();
    if (run == 0) {
      first_losses = losses;
      first_grads = grads;
      first_forward = forward;
      continue;
    }
    expect_same_bits(forward, first_forward, "forward losses, run " + std::to_string(run));
    expect_same_bits(losses, first_losses, "forward_backward losses, run " + std::to_string(run));
    expect_same_bits(grads, first_grads, "dlogits, run " + std::to_string(run));
  }
}

// Device targets are trusted, but one >= V must not read out of range: its row's loss and
// real gradients are NaN, its padding 0, and the other rows are unaffected.
TEST(CudaSoftmaxXent, TargetOutsideVocabularyGivesNaNRow) {
  ETR_REQUIRE_GPU();
  const XentCase c{9, 61, 64, 3.0f};
  const std::vector<float> logits = make_logits(c, 31);
  std::vector<int32_t> targets = make_targets(c, 32);
  targets[4] = static_cast<int32_t>(c.V);  // the first padding column
  std::vector<int32_t> cpu_targets = targets;
  cpu_targets[4] = -1;  // the CPU rejects >= V; compare the other rows with an ignored one
  std::vector<float> want_losses(c.N), want_dlogits(c.N * c.Vp);
  cpu::softmax_xent_forward_backward<float>(want_losses.data(), want_dlogits.data(), logits.data(),
                                            cpu_targets.data(), 0.5f, c.N, c.V, c.Vp);
  EXPECT_THROW(cpu::softmax_xent_forward<float>(want_losses.data(), logits.data(), targets.data(),
                                                c.N, c.V, c.Vp),
               InvalidArgument);

  DeviceArray<float> d_logits(logits), d_losses = DeviceArray<float>::poisoned(c.N);
  DeviceArray<float> d_dlogits = DeviceArray<float>::poisoned(c.N * c.Vp);
  DeviceArray<int32_t> d_targets(targets);
  cuda::softmax_xent_forward_backward(d_losses.data(), d_dlogits.data(), d_logits.data(),
                                      d_targets.data(), 0.5f, c.N, c.V, c.Vp, stream());
  std::vector<float> losses = d_losses.download(), grads = d_dlogits.download();
  EXPECT_TRUE(std::isnan(losses[4])) << "loss of the out-of-range target: " << losses[4];
  for (int64_t v = 0; v < c.Vp; ++v) {
    const float g = grads[4 * c.Vp + v];
    if (v < c.V) {
      EXPECT_TRUE(std::isnan(g)) << "dlogits[4, " << v << "] = " << g;
    } else {
      EXPECT_TRUE(is_plus_zero(g)) << "padding dlogits[4, " << v << "] = " << g;
    }
  }
  // Row 4 made like the CPU's ignored row, then everything compared.
  losses[4] = 0.0f;
  for (int64_t v = 0; v < c.Vp; ++v) grads[4 * c.Vp + v] = 0.0f;
  expect_close(losses, want_losses, 1e-5, "losses beside an out-of-range target");
  expect_close(grads, want_dlogits, 1e-5, "dlogits beside an out-of-range target");

  DeviceArray<float> d_forward = DeviceArray<float>::poisoned(c.N);
  cuda::softmax_xent_forward(d_forward.data(), d_logits.data(), d_targets.data(), c.N, c.V, c.Vp,
                             stream());
  EXPECT_TRUE(std::isnan(d_forward.download()[4]));
}

TEST(CudaSoftmaxXent, EmptyBatchLeavesBuffersUntouched) {
  ETR_REQUIRE_GPU();
  const std::vector<float> before = random_floats(40, 41);
  DeviceArray<float> d_losses(before), d_dlogits(before), d_logits(before);
  DeviceArray<int32_t> d_targets(std::vector<int32_t>{1, 2, 3});
  cuda::softmax_xent_forward(d_losses.data(), d_logits.data(), d_targets.data(), 0, 8, 8, stream());
  cuda::softmax_xent_forward_backward(d_losses.data(), d_dlogits.data(), d_logits.data(),
                                      d_targets.data(), 1.0f, 0, 8, 8, stream());
  expect_same_bits(d_losses.download(), before, "losses after N = 0");
  expect_same_bits(d_dlogits.download(), before, "dlogits after N = 0");
}

TEST(CudaSoftmaxXent, RejectsBadSizes) {
  ETR_REQUIRE_GPU();
  DeviceArray<float> d_losses(4), d_logits(64);
  DeviceArray<int32_t> d_targets(4);
  float* l = d_losses.data();
  const float* x = d_logits.data();
  const int32_t* t = d_targets.data();
  EXPECT_THROW(cuda::softmax_xent_forward(l, x, t, -1, 8, 8, stream()), InvalidArgument);
  EXPECT_THROW(cuda::softmax_xent_forward(l, x, t, 4, 0, 8, stream()), InvalidArgument);
  EXPECT_THROW(cuda::softmax_xent_forward(l, x, t, 4, 9, 8, stream()), InvalidArgument);
  EXPECT_THROW(
      cuda::softmax_xent_forward_backward(l, d_logits.data(), x, t, 1.0f, 4, 16, 15, stream()),
      InvalidArgument);
  testing::sync();
}

}  // namespace
}  // namespace etr
