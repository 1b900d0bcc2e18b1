// cuda::encoder_forward/backward against cpu::encoder_*<float> on the same inputs: relative
// L2 1e-5, and the same bits (the CUDA kernels add in the CPU's order, encoder.h). Shapes
// with heavily repeated tokens (V 7, and V 1: every position the same id), GPT-2's V with
// padding rows Vp > V that must stay untouched, maxT > T (rows [T, maxT) of dwpe untouched),
// odd C, runs of equal ids, NaN-poisoned outputs, gradients pre-filled with random values on
// both sides, empty batches, bad sizes, ids outside the vocabulary, and two runs giving the
// same bits. Skipped when no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/kernel_test_util.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/encoder.h"
#include "runtime/kernels/kernels.h"

namespace etr {
namespace {

using etr::testing::DeviceArray;
using etr::testing::expect_close;
using etr::testing::expect_same_bits;
using etr::testing::random_floats;
using etr::testing::random_tokens;
using etr::testing::stream;

constexpr double kTol = 1e-5;

struct Shape {
  int64_t B, T, C, V, Vp, maxT;
  bool runs;  // ids in runs of equal values (i / 5 % V) instead of random
};

const Shape kShapes[] = {
    {3, 37, 72, 7, 10, 40, false},          // few ids: most positions share one
    {4, 128, 256, 1000, 1024, 128, false},  // the larger shape
    {2, 64, 100, 50257, 50304, 70, false},  // GPT-2's vocabulary: many buckets, padding
    {2, 33, 1600, 1, 3, 33, false},         // one id for every position; GPT-2 XL's C
    {5, 41, 33, 13, 16, 50, true},          // runs, and a C of one warp and one lane
    {1, 1, 1, 1, 1, 1, false},
};

std::string name(const Shape& s) {
  return "B " + std::to_string(s.B) + ", T " + std::to_string(s.T) + ", C " + std::to_string(s.C) +
         ", V " + std::to_string(s.V);
}

std::vector<int32_t> make_tokens(const Shape& s, uint64_t seed) {
  if (!s.runs) return random_tokens(s.B * s.T, s.V, seed);
  std::vector<int32_t> t(static_cast<size_t>(s.B * s.T));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(i / 5 % s.V);
  return t;
}

TEST(CudaEncoder, ForwardMatchesCpu) {
  ETR_REQUIRE_GPU();
  uint64_t seed = 100;
  for (const Shape& s : kShapes) {
    const std::vector<int32_t> tokens = make_tokens(s, seed += 10);
    const std::vector<float> wte = random_floats(s.Vp * s.C, seed + 1);
    const std::vector<float> wpe = random_floats(s.maxT * s.C, seed + 2);
    std::vector<float> out(s.B * s.T * s.C);
    cpu::encoder_forward<float>(out.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C,
                                s.V);
    DeviceArray<int32_t> d_tokens(tokens);
    DeviceArray<float> d_wte(wte), d_wpe(wpe);
    auto d_out = DeviceArray<float>::poisoned(s.B * s.T * s.C);
    cuda::encoder_forward(d_out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), s.B, s.T, s.C,
                          s.V, stream());
    std::vector<float> got = d_out.download();
    expect_close(got, out, kTol, "out, " + name(s));
    expect_same_bits(got, out, "out bits, " + name(s));
  }
}

// Backward into gradients pre-filled with random values; each shape runs twice on the GPU.
TEST(CudaEncoder, BackwardMatchesCpuAndAccumulates) {
  ETR_REQUIRE_GPU();
  uint64_t seed = 300;
  for (const Shape& s : kShapes) {
    const std::vector<int32_t> tokens = make_tokens(s, seed += 10);
    const std::vector<float> dout = random_floats(s.B * s.T * s.C, seed + 1);
    const std::vector<float> dwte0 = random_floats(s.Vp * s.C, seed + 2);
    const std::vector<float> dwpe0 = random_floats(s.maxT * s.C, seed + 3);
    std::vector<float> dwte = dwte0, dwpe = dwpe0;
    cpu::encoder_backward<float>(dwte.data(), dwpe.data(), dout.data(), tokens.data(), s.B, s.T,
                                 s.C, s.V);
    DeviceArray<int32_t> d_tokens(tokens);
    DeviceArray<float> d_dout(dout);
    std::vector<float> first_wte, first_wpe;
    for (int run = 0; run < 2; ++run) {
      DeviceArray<float> d_dwte(dwte0), d_dwpe(dwpe0);
      cuda::encoder_backward(d_dwte.data(), d_dwpe.data(), d_dout.data(), d_tokens.data(), s.B, s.T,
                             s.C, s.V, stream());
      std::vector<float> got_wte = d_dwte.download(), got_wpe = d_dwpe.download();
      if (run == 1) {
        expect_same_bits(got_wte, first_wte, "dwte rerun, " + name(s));
        expect_same_bits(got_wpe, first_wpe, "dwpe rerun, " + name(s));
        continue;
      }
      expect_close(got_wte, dwte, kTol, "dwte, " + name(s));
      expect_close(got_wpe, dwpe, kTol, "dwpe, " + name(s));
      expect_same_bits(got_wte, dwte, "dwte bits, " + name(s));
      expect_same_bits(got_wpe, dwpe, "dwpe bits, " + name(s));
      // Padding rows of dwte and rows [T, maxT) of dwpe keep their old values (the CPU
      // comparison covers them too; this says which part went wrong).
      const std::vector<float> pad_got(got_wte.begin() + s.V * s.C, got_wte.end());
      const std::vector<float> pad_old(dwte0.begin() + s.V * s.C, dwte0.end());
      expect_same_bits(pad_got, pad_old, "dwte padding rows, " + name(s));
      const std::vector<float> tail_got(got_wpe.begin() + s.T * s.C, got_wpe.end());
      const std::vector<float> tail_old(dwpe0.begin() + s.T * s.C, dwpe0.end());
      expect_same_bits(tail_got, tail_old, "dwpe rows past T, " + name(s));
      first_wte = got_wte;
      first_wpe = got_wpe;
    }
  }
}

// Ids outside [0, V) are not checked on the GPU (encoder.h): the forward writes NaN for
// their positions, the backward leaves them out of dwte (dwpe still takes their dout).
TEST(CudaEncoder, IdsOutsideTheVocabularyArePoisonedAndSkipped) {
  ETR_REQUIRE_GPU();
  const int64_t B = 2, T = 19, C = 40, V = 11, Vp = 12;
  std::vector<int32_t> tokens = random_tokens(B * T, V, 77);
  const std::vector<int64_t> bad = {0, 5, 20, 37};
  tokens[0] = -1;
  tokens[5] = static_cast<int32_t>(V);  // the padding row: still outside the vocabulary
  tokens[20] = 1 << 30;
  tokens[37] = -2000000000;
  const std::vector<float> wte = random_floats(Vp * C, 78), wpe = random_floats(T * C, 79);
  const std::vector<float> dout = random_floats(B * T * C, 80);
  const std::vector<float> dwte0 = random_floats(Vp * C, 81), dwpe0 = random_floats(T * C, 82);

  // The references: valid ids in place of the bad ones, and for dwte zero dout rows there.
  std::vector<int32_t> fixed = tokens;
  std::vector<float> dout_valid = dout;
  for (int64_t p : bad) {
    fixed[p] = 0;
    for (int64_t c = 0; c < C; ++c) dout_valid[p * C + c] = 0.0f;
  }
  // Scratch for the gradient each reference call does not compare: [T, C] for dwpe, [Vp, C]
  // for dwte.
  std::vector<float> out(B * T * C), dwte = dwte0, dwpe = dwpe0;
  std::vector<float> dwpe_scratch = dwpe0, dwte_scratch = dwte0;
  cpu::encoder_forward<float>(out.data(), fixed.data(), wte.data(), wpe.data(), B, T, C, V);
  cpu::encoder_backward<float>(dwte.data(), dwpe_scratch.data(), dout_valid.data(), fixed.data(), B,
                               T, C, V);
  cpu::encoder_backward<float>(dwte_scratch.data(), dwpe.data(), dout.data(), fixed.data(), B, T, C,
                               V);

  DeviceArray<int32_t> d_tokens(tokens);
  DeviceArray<float> d_wte(wte), d_wpe(wpe), d_dout(dout), d_dwte(dwte0), d_dwpe(dwpe0);
  auto d_out = DeviceArray<float>::poisoned(B * T * C);
  cuda::encoder_forward(d_out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), B, T, C, V,
                        stream());
  cuda::encoder_backward(d_dwte.data(), d_dwpe.data(), d_dout.data(), d_tokens.data(), B, T, C, V,
                         stream());
  std::vector<float> got = d_out.download();
  for (int64_t p = 0; p < B * T; ++p) {
    const bool is_bad = std::find(bad.begin(), bad.end(), p) != bad.end();
    for (int64_t c = 0; c < C; ++c) {
      const float g = got[p * C + c];
      if (is_bad) {
        EXPECT_TRUE(std::isnan(g)) << "position " << p << " channel " << c << ": " << g;
      } else {
        EXPECT_EQ(g, out[p * C + c]) << "position " << p << " channel " << c;
      }
    }
  }
  expect_same_bits(d_dwte.download(), dwte, "dwte without the bad positions");
  expect_same_bits(d_dwpe.download(), dwpe, "dwpe with every position");
}

TEST(CudaEncoder, EmptyBatchLeavesBuffersUntouched) {
  ETR_REQUIRE_GPU();
  const std::vector<float> a = random_floats(64, 1), b = random_floats(64, 2);
  const std::vector<int32_t> tokens = random_tokens(8, 4, 3);
  DeviceArray<float> d_a(a), d_b(b);
  DeviceArray<int32_t> d_tokens(tokens);
  const int64_t sizes[][3] = {{0, 4, 8}, {2, 0, 8}, {2, 4, 0}};  // B, T, C
  for (const auto& z : sizes) {
    cuda::encoder_forward(d_a.data(), d_tokens.data(), d_b.data(), d_b.data(), z[0], z[1], z[2], 4,
                          stream());
    cuda::encoder_backward(d_a.data(), d_b.data(), d_a.data(), d_tokens.data(), z[0], z[1], z[2], 4,
                           stream());
  }
  expect_same_bits(d_a.download(), a, "out / dwte");
  expect_same_bits(d_b.download(), b, "dwpe");
}

TEST(CudaEncoder, BadSizesThrow) {
  ETR_REQUIRE_GPU();
  EXPECT_THROW(cuda::encoder_forward(nullptr, nullptr, nullptr, nullptr, 2, 3, 4, 0, stream()),
               InvalidArgument);
  EXPECT_THROW(cuda::encoder_forward(nullptr, nullptr, nullptr, nullptr, -1, 3, 4, 5, stream()),
               InvalidArgument);
  EXPECT_THROW(cuda::encoder_backward(nullptr, nullptr, nullptr, nullptr, 2, 3, 4, 0, stream()),
               InvalidArgument);
  EXPECT_THROW(cuda::encoder_backward(nullptr, nullptr, nullptr, nullptr, 2, -3, 4, 5, stream()),
               InvalidArgument);
  EXPECT_THROW(cuda::encoder_backward(nullptr, nullptr, nullptr, nullptr, 2, 3, -4, 5, stream()),
               InvalidArgument);
  CUDA_CHECK(cudaStreamSynchronize(stream()));  // nothing was enqueued that could fail
}

}  // namespace
}  // namespace etr
