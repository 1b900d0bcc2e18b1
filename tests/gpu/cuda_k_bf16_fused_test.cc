// The fused bf16 forwards (runtime/kernels/cuda/bf16/fused_bf16.h) against the composition
// of the CPU bf16 reference's unfused members (cpu::bf16_reference_set()) on the same
// random bf16 inputs: residual_forward then layernorm_forward, and matmul_forward then
// gelu_forward. Every output is checked (NaN poison in each, relative L2 1e-2, no NaN or
// Inf); x1 = bf16(inp1 + inp2) is one rounding of an exact sum on both sides, so it is
// checked bitwise. Shapes mix C % 8 != 0 (scalar paths; OC % 8 != 0, the matmul's
// composition) with GPT-2's (N 1024, C 768, OC 3072); x1 == inp2 as the layers call it;
// unaligned pointers; a null bias and pre == out (the composition); and a rerun that must
// repeat every output bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/kernel_test_util.h"
#include "runtime/dtype.h"
#include "runtime/kernels/cpu/bf16_reference.h"
#include "runtime/kernels/cuda/bf16/fused_bf16.h"
#include "runtime/kernels/dispatch.h"

namespace etr {
namespace {

using testing::DeviceArray;
using testing::expect_close;
using testing::expect_same_bits;
using testing::random_floats;

constexpr double kTol = 1e-2;
constexpr double kEps = 1e-5;

const KernelSet<bf16>& ref() {
  return cpu::bf16_reference_set();
}
cudaStream_t s() {
  return testing::stream();
}

std::vector<bf16> random_bf16(int64_t n, uint64_t seed, float scale = 1.0f, float shift = 0.0f) {
  std::vector<float> f = random_floats(n, seed, scale);
  std::vector<bf16> out(f.size());
  for (size_t i = 0; i < f.size(); ++i) out[i] = bf16(f[i] + shift);
  return out;
}

std::vector<float> widen(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i]);
  return out;
}

// Elements [first, first + n) of a device array, widened.
std::vector<float> widen_range(const DeviceArray<bf16>& d, int64_t first, int64_t n) {
  const std::vector<bf16> all = d.download();
  return widen({all.begin() + first, all.begin() + first + n});
}

std::vector<float> zeros(int64_t n) {
  return std::vector<float>(static_cast<size_t>(n), 0.0f);
}

// ---- residual + layernorm ----

struct RowShape {
  int64_t N, C;
};

// The CPU composition: x1 = inp1 + inp2, then the LayerNorm of x1.
struct ResidualLayernormRef {
  std::vector<bf16> x1, y;
  std::vector<float> mean, rstd;
};

ResidualLayernormRef residual_layernorm_ref(const std::vector<bf16>& inp1,
                                            const std::vector<bf16>& inp2,
                                            const std::vector<bf16>& w, const std::vector<bf16>& b,
                                            int64_t N, int64_t C) {
  ResidualLayernormRef r{std::vector<bf16>(static_cast<size_t>(N * C)),
                         std::vector<bf16>(static_cast<size_t>(N * C)), zeros(N), zeros(N)};
  ref().residual_forward(r.x1.data(), inp1.data(), inp2.data(), N * C, nullptr);
  ref().layernorm_forward(r.y.data(), r.mean.data(), r.rstd.data(), r.x1.data(), w.data(), b.data(),
                          N, C, kEps, nullptr);
  return r;
}

// Inputs a residual stream might hold: x1 has a non-zero mean, so the two-pass variance
// and the rounding of x1 before the statistics both matter.
struct ResidualLayernormInputs {
  std::vector<bf16> inp1, inp2, w, b;
  ResidualLayernormInputs(int64_t N, int64_t C, uint64_t seed)
      : inp1(random_bf16(N * C, seed, 2.0f, 0.5f)),
        inp2(random_bf16(N * C, seed + 1, 1.0f)),
        w(random_bf16(C, seed + 2, 1.0f, 1.0f)),
        b(random_bf16(C, seed + 3)) {}
};

class CudaBf16ResidualLayernorm : public ::testing::TestWithParam<RowShape> {};

TEST_P(CudaBf16ResidualLayernorm, MatchesComposition) {
  ETR_REQUIRE_GPU();
  const auto [N, C] = GetParam();
  const ResidualLayernormInputs in(N, C, 100);
  const ResidualLayernormRef want = residual_layernorm_ref(in.inp1, in.inp2, in.w, in.b, N, C);
  DeviceArray<bf16> d_inp1(in.inp1), d_inp2(in.inp2), d_w(in.w), d_b(in.b);
  auto d_x1 = DeviceArray<bf16>::poisoned(N * C), d_y = DeviceArray<bf16>::poisoned(N * C);
  auto d_mean = DeviceArray<float>::poisoned(N), d_rstd = DeviceArray<float>::poisoned(N);
  cuda::residual_layernorm_forward(d_x1.data(), d_y.data(), d_mean.data(), d_rstd.data(),
                                   d_inp1.data(), d_inp2.data(), d_w.data(), d_b.data(), N, C, kEps,
                                   s());
  expect_same_bits(widen(d_x1.download()), widen(want.x1), "residual_layernorm x1");
  expect_close(widen(d_y.download()), widen(want.y), kTol, "residual_layernorm y");
  expect_close(d_mean.download(), want.mean, kTol, "residual_layernorm mean");
  expect_close(d_rstd.download(), want.rstd, kTol, "residual_layernorm rstd");
}

// x1 == inp2, as the transformer block calls it (the residual stream updated in place).
TEST_P(CudaBf16ResidualLayernorm, InPlaceIntoInp2) {
  ETR_REQUIRE_GPU();
  const auto [N, C] = GetParam();
  const ResidualLayernormInputs in(N, C, 110);
  const ResidualLayernormRef want = residual_layernorm_ref(in.inp1, in.inp2, in.w, in.b, N, C);
  DeviceArray<bf16> d_inp1(in.inp1), d_stream(in.inp2), d_w(in.w), d_b(in.b);
  auto d_y = DeviceArray<bf16>::poisoned(N * C);
  auto d_mean = DeviceArray<float>::poisoned(N), d_rstd = DeviceArray<float>::poisoned(N);
  cuda::residual_layernorm_forward(d_stream.data(), d_y.data(), d_mean.data(), d_rstd.data(),
                                   d_inp1.data(), d_stream.data(), d_w.data(), d_b.data(), N, C,
                                   kEps, s());
  expect_same_bits(widen(d_stream.download()), widen(want.x1), "residual_layernorm x1 == inp2");
  expect_close(widen(d_y.download()), widen(want.y), kTol, "residual_layernorm y, x1 == inp2");
  expect_close(d_mean.download(), want.mean, kTol, "residual_layernorm mean, x1 == inp2");
  expect_close(d_rstd.download(), want.rstd, kTol, "residual_layernorm rstd, x1 == inp2");
}

// C 13 and 76: scalar path; C 768: GPT-2's width, 16-byte path, N 1024 = B 8 x T 128;
// C 4000: fewer warps a block (shared memory); C 30000: wider than the shared memory
// budget, the composition.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaBf16ResidualLayernorm,
                         ::testing::Values(RowShape{3, 13}, RowShape{37, 76}, RowShape{1024, 768},
                                           RowShape{33, 4000}, RowShape{5, 30000}));

// Every pointer one element past a 16-byte boundary with C % 8 == 0: the scalar path,
// and nothing written outside the rows.
TEST(CudaBf16ResidualLayernormUnaligned, MatchesComposition) {
  ETR_REQUIRE_GPU();
  const int64_t N = 37, C = 768, n = N * C;
  const ResidualLayernormInputs in(N, C, 120);
  const ResidualLayernormRef want = residual_layernorm_ref(in.inp1, in.inp2, in.w, in.b, N, C);
  auto shifted = [](const std::vector<bf16>& v) {
    std::vector<bf16> out(v.size() + 1, bf16(7.0f));
    std::copy(v.begin(), v.end(), out.begin() + 1);
    return out;
  };
  DeviceArray<bf16> d_inp1(shifted(in.inp1)), d_inp2(shifted(in.inp2)), d_w(shifted(in.w));
  DeviceArray<bf16> d_b(shifted(in.b));
  auto d_x1 = DeviceArray<bf16>::poisoned(n + 2), d_y = DeviceArray<bf16>::poisoned(n + 2);
  DeviceArray<float> d_mean(N), d_rstd(N);
  cuda::residual_layernorm_forward(d_x1.data() + 1, d_y.data() + 1, d_mean.data(), d_rstd.data(),
                                   d_inp1.data() + 1, d_inp2.data() + 1, d_w.data() + 1,
                                   d_b.data() + 1, N, C, kEps, s());
  expect_same_bits(widen_range(d_x1, 1, n), widen(want.x1), "residual_layernorm x1 unaligned");
  expect_close(widen_range(d_y, 1, n), widen(want.y), kTol, "residual_layernorm y unaligned");
  expect_close(d_mean.download(), want.mean, kTol, "residual_layernorm mean unaligned");
  expect_close(d_rstd.download(), want.rstd, kTol, "residual_layernorm rstd unaligned");
  const std::vector<bf16> x1 = d_x1.download(), y = d_y.download();
  for (int64_t i : {int64_t{0}, n + 1}) {
    EXPECT_EQ(x1[i].bits, 0xFFFF) << "x1 written outside its range at " << i;
    EXPECT_EQ(y[i].bits, 0xFFFF) << "y written outside its range at " << i;
  }
}

// mean and rstd both nullptr: not saved; x1 and y as before.
TEST(CudaBf16ResidualLayernormNulls, NoStatistics) {
  ETR_REQUIRE_GPU();
  const int64_t N = 37, C = 76;
  const ResidualLayernormInputs in(N, C, 130);
  const ResidualLayernormRef want = residual_layernorm_ref(in.inp1, in.inp2, in.w, in.b, N, C);
  DeviceArray<bf16> d_inp1(in.inp1), d_inp2(in.inp2), d_w(in.w), d_b(in.b);
  auto d_x1 = DeviceArray<bf16>::poisoned(N * C), d_y = DeviceArray<bf16>::poisoned(N * C);
  cuda::residual_layernorm_forward(d_x1.data(), d_y.data(), nullptr, nullptr, d_inp1.data(),
                                   d_inp2.data(), d_w.data(), d_b.data(), N, C, kEps, s());
  expect_same_bits(widen(d_x1.download()), widen(want.x1), "residual_layernorm x1, no stats");
  expect_close(widen(d_y.download()), widen(want.y), kTol, "residual_layernorm y, no stats");
}

// ---- matmul + GELU ----

struct MatmulShape {
  int64_t N, C, OC;
};

struct MatmulGeluRef {
  std::vector<bf16> pre, out;
};

MatmulGeluRef matmul_gelu_ref(const std::vector<bf16>& inp, const std::vector<bf16>& w,
                              const bf16* bias, int64_t N, int64_t C, int64_t OC) {
  MatmulGeluRef r{std::vector<bf16>(static_cast<size_t>(N * OC)),
                  std::vector<bf16>(static_cast<size_t>(N * OC))};
  ref().matmul_forward(r.pre.data(), inp.data(), w.data(), bias, N, C, OC, nullptr);
  ref().gelu_forward(r.out.data(), r.pre.data(), N * OC, nullptr);
  return r;
}

class CudaBf16MatmulGelu : public ::testing::TestWithParam<MatmulShape> {};

// With a bias (the epilogue where OC % 8 == 0) and without (the composition).
TEST_P(CudaBf16MatmulGelu, MatchesComposition) {
  ETR_REQUIRE_GPU();
  const auto [N, C, OC] = GetParam();
  // Inputs scaled so the products spread over GELU's curved part, both signs.
  const std::vector<bf16> inp = random_bf16(N * C, 200), w = random_bf16(OC * C, 201, 0.1f);
  const std::vector<bf16> bias = random_bf16(OC, 202);
  DeviceArray<bf16> d_inp(inp), d_w(w), d_bias(bias);
  for (bool with_bias : {true, false}) {
    const std::string what = with_bias ? "matmul_gelu " : "matmul_gelu without bias ";
    const MatmulGeluRef want = matmul_gelu_ref(inp, w, with_bias ? bias.data() : nullptr, N, C, OC);
    auto d_pre = DeviceArray<bf16>::poisoned(N * OC), d_out = DeviceArray<bf16>::poisoned(N * OC);
    cuda::matmul_gelu_forward(d_pre.data(), d_out.data(), d_inp.data(), d_w.data(),
                              with_bias ? d_bias.data() : nullptr, N, C, OC, s());
    expect_close(widen(d_pre.download()), widen(want.pre), kTol, what + "pre");
    expect_close(widen(d_out.download()), widen(want.out), kTol, what + "out");
  }
}

// OC 45 and 7: OC % 8 != 0, the composition; OC 216 and 3072: the epilogue (where
// cuBLASLt has an algorithm); N 1024, C 768, OC 3072: GPT-2's MLP at B 8 x T 128.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaBf16MatmulGelu,
                         ::testing::Values(MatmulShape{37, 76, 45}, MatmulShape{5, 13, 7},
                                           MatmulShape{111, 72, 216},
                                           MatmulShape{1024, 768, 3072}));

// pre == out: the composition's in-place GELU, so the one buffer ends as gelu(pre).
TEST(CudaBf16MatmulGeluAliased, PreIsOut) {
  ETR_REQUIRE_GPU();
  const int64_t N = 64, C = 128, OC = 256;
  const std::vector<bf16> inp = random_bf16(N * C, 210), w = random_bf16(OC * C, 211, 0.2f);
  const std::vector<bf16> bias = random_bf16(OC, 212);
  const MatmulGeluRef want = matmul_gelu_ref(inp, w, bias.data(), N, C, OC);
  DeviceArray<bf16> d_inp(inp), d_w(w), d_bias(bias);
  auto d_buf = DeviceArray<bf16>::poisoned(N * OC);
  cuda::matmul_gelu_forward(d_buf.data(), d_buf.data(), d_inp.data(), d_w.data(), d_bias.data(), N,
                            C, OC, s());
  expect_close(widen(d_buf.download()), widen(want.out), kTol, "matmul_gelu pre == out");
}

// ---- determinism ----

// Both fused forwards twice on the same inputs: every output the same bits.
TEST(CudaBf16FusedDeterminism, RerunRepeatsBitwise) {
  ETR_REQUIRE_GPU();
  const int64_t N = 1024, C = 768, OC = 3072;
  const ResidualLayernormInputs ln(N, C, 300);
  const std::vector<bf16> w = random_bf16(OC * C, 301, 0.1f), bias = random_bf16(OC, 302);
  DeviceArray<bf16> d_inp1(ln.inp1), d_inp2(ln.inp2), d_lnw(ln.w), d_lnb(ln.b);
  DeviceArray<bf16> d_w(w), d_bias(bias);
  auto run = [&] {
    auto x1 = DeviceArray<bf16>::poisoned(N * C), y = DeviceArray<bf16>::poisoned(N * C);
    auto mean = DeviceArray<float>::poisoned(N), rstd = DeviceArray<float>::poisoned(N);
    auto pre = DeviceArray<bf16>::poisoned(N * OC), out = DeviceArray<bf16>::poisoned(N * OC);
    cuda::residual_layernorm_forward(x1.data(), y.data(), mean.data(), rstd.data(), d_inp1.data(),
                                     d_inp2.data(), d_lnw.data(), d_lnb.data(), N, C, kEps, s());
    cuda::matmul_gelu_forward(pre.data(), out.data(), y.data(), d_w.data(), d_bias.data(), N, C, OC,
                              s());
    return std::vector<std::vector<float>>{widen(x1.download()),  widen(y.download()),
                                           mean.download(),       rstd.download(),
                                           widen(pre.download()), widen(out.download())};
  };
  const auto first = run(), second = run();
  const char* names[] = {"x1", "y", "mean", "rstd", "pre", "out"};
  for (size_t i = 0; i < first.size(); ++i) {
    expect_same_bits(second[i], first[i], std::string(names[i]) + " rerun");
  }
}

}  // namespace
}  // namespace etr
