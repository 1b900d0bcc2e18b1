// The CUDA bf16 set's attention (the flash attention for head sizes 64 and 128, the plain
// one otherwise) against the CPU bf16 reference, as cuda_k_bf16_test.cc does for the rest.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/bf16_test_util.h"

namespace etr {
namespace {

using namespace bf16_test;  // NOLINT: the helpers of every bf16 kernel test

// ---- attention ----
// Heads of 64 and 128 take the flash attention (runtime/kernels/cuda/bf16/flash_attention.h),
// which saves the log-sum-exp instead of the probabilities: att is compared only where the
// set saves the whole [B, NH, T, T]. Other head sizes (12, 32) take the plain one.

struct AttnShape {
  int64_t B, T, C, NH;
};

// dqkv [N, 3C] compared a part at a time (q, k, v columns), so that the small dq is not
// lost beside dv in one relative L2.
void expect_dqkv(const DeviceArray<bf16>& got, const std::vector<bf16>& want, int64_t N, int64_t C,
                 const std::string& what) {
  const std::vector<float> g = widen(got.download()), w = widen(want);
  const char* names[] = {"dq", "dk", "dv"};
  for (int64_t part = 0; part < 3; ++part) {
    std::vector<float> gp, wp;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t at = n * 3 * C + part * C;
      gp.insert(gp.end(), g.begin() + at, g.begin() + at + C);
      wp.insert(wp.end(), w.begin() + at, w.begin() + at + C);
    }
    expect_close(gp, wp, kTol, what + " " + names[part]);
  }
}

class CudaBf16Attention : public ::testing::TestWithParam<AttnShape> {};

// The backward runs twice into the same dqkv: the first from zeros (the gradient alone, a
// part at a time), the second onto the first's values (+=).
TEST_P(CudaBf16Attention, ForwardAndBackwardMatchReference) {
  ETR_REQUIRE_GPU();
  const auto [B, T, C, NH] = GetParam();
  const std::vector<bf16> qkv = random_bf16(B * T * 3 * C, 70), dout = random_bf16(B * T * C, 71);
  DeviceArray<bf16> d_qkv(qkv), d_dout(dout);
  const int64_t saved_n = gpu().attention_saved_numel(B, T, C, NH);
  auto d_out = DeviceArray<bf16>::poisoned(B * T * C);
  auto d_att = DeviceArray<bf16>::poisoned(saved_n);
  std::vector<bf16> out(static_cast<size_t>(B * T * C));
  std::vector<bf16> att(static_cast<size_t>(ref().attention_saved_numel(B, T, C, NH)));
  gpu().attention_forward(d_out.data(), d_att.data(), d_qkv.data(), B, T, C, NH, s());
  ref().attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, nullptr);
  expect_bf16(d_out, out, "attention out");
  if (saved_n == B * NH * T * T) expect_bf16(d_att, att, "attention att");

  const int64_t scratch_n = gpu().attention_backward_scratch_size(B, T, C, NH);
  auto d_scratch = DeviceArray<bf16>::poisoned(scratch_n);
  std::vector<bf16> dqkv(static_cast<size_t>(B * T * 3 * C), bf16(0.0f));
  DeviceArray<bf16> d_dqkv(dqkv);
  for (const char* what : {"attention", "attention accumulated"}) {
    gpu().attention_backward(d_dqkv.data(), d_scratch.data(), scratch_n, d_dout.data(),
                             d_qkv.data(), d_att.data(), d_out.data(), B, T, C, NH, s());
    ref().attention_backward(dqkv.data(), nullptr, 0, dout.data(), qkv.data(), att.data(),
                             out.data(), B, T, C, NH, nullptr);
    expect_dqkv(d_dqkv, dqkv, B * T, C, what);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaBf16Attention,
    ::testing::Values(AttnShape{2, 37, 48, 4},      // hs 12: the plain attention
                      AttnShape{1, 64, 96, 3},      // hs 32: the plain attention
                      AttnShape{3, 1, 256, 4},      // hs 64, one position
                      AttnShape{2, 37, 256, 4},     // hs 64, one partial tile
                      AttnShape{2, 65, 512, 8},     // hs 64, a full tile and one row
                      AttnShape{1, 64, 768, 12},    // hs 64, exactly one tile
                      AttnShape{1, 200, 768, 12},   // hs 64, GPT-2 124M heads, 4 tiles
                      AttnShape{2, 1024, 768, 12},  // hs 64, GPT-2 124M's context
                      AttnShape{2, 77, 512, 4},     // hs 128, a partial second tile
                      AttnShape{1, 300, 1536, 12}   // hs 128, 5 tiles
                      ));

// The set saves the T x T matrix only where it falls back to the plain attention.
TEST(CudaBf16AttentionMemory, FlashSavesRowStatisticsOnly) {
  ETR_REQUIRE_GPU();
  const int64_t B = 2, T = 1024;
  if (gpu().attention_saved_numel(B, T, 48, 4) != B * 4 * T * T) {
    ADD_FAILURE() << "head size 12 should fall back to the plain attention";
  }
  const int64_t flash = gpu().attention_saved_numel(B, T, 768, 12);
  if (flash == B * 12 * T * T) GTEST_SKIP() << "ETR_FLASH_ATTENTION=0: the plain attention";
  EXPECT_EQ(flash, 2 * B * 12 * T);  // the fp32 lse [B, NH, T]
  EXPECT_EQ(gpu().attention_backward_scratch_size(B, T, 768, 12), 2 * B * 12 * T);
  EXPECT_EQ(gpu().attention_saved_numel(1, 5, 256, 2), 24);  // 20, rounded up to 16 bytes
}

// No atomics: two runs of the forward and of the backward give the same bits.
TEST(CudaBf16AttentionDeterminism, ForwardAndBackwardRepeatBitwise) {
  ETR_REQUIRE_GPU();
  for (const AttnShape& shape : {AttnShape{2, 200, 768, 12}, AttnShape{1, 130, 512, 4}}) {
    const auto [B, T, C, NH] = shape;
    DeviceArray<bf16> d_qkv(random_bf16(B * T * 3 * C, 73)), d_dout(random_bf16(B * T * C, 74));
    const std::vector<bf16> dqkv0 = random_bf16(B * T * 3 * C, 75);
    const int64_t saved_n = gpu().attention_saved_numel(B, T, C, NH);
    const int64_t scratch_n = gpu().attention_backward_scratch_size(B, T, C, NH);
    auto run = [&] {
      auto out = DeviceArray<bf16>::poisoned(B * T * C), att = DeviceArray<bf16>::poisoned(saved_n);
      auto scratch = DeviceArray<bf16>::poisoned(scratch_n);
      DeviceArray<bf16> dqkv(dqkv0);
      gpu().attention_forward(out.data(), att.data(), d_qkv.data(), B, T, C, NH, s());
      gpu().attention_backward(dqkv.data(), scratch.data(), scratch_n, d_dout.data(), d_qkv.data(),
                               att.data(), out.data(), B, T, C, NH, s());
      return std::vector<std::vector<float>>{widen(out.download()), widen(att.download()),
                                             widen(dqkv.download())};
    };
    const auto first = run(), second = run();
    const char* names[] = {"out", "att", "dqkv"};
    for (size_t i = 0; i < first.size(); ++i) {
      testing::expect_same_bits(
          second[i], first[i],
          std::string("attention ") + names[i] + " rerun, C " + std::to_string(C));
    }
  }
}

}  // namespace
}  // namespace etr
