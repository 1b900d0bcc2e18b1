// The CUDA bf16 kernel set (cuda::kernel_set_bf16(), runtime/kernels/cuda/bf16/) against
// the CPU bf16 reference (cpu::bf16_reference_set(), runtime/kernels/cpu/bf16_reference.h)
// member by member: the same random bf16 inputs, random pre-existing values in every
// accumulated output, NaN poison in every assigned one, and each output compared at
// relative L2 1e-2 with no NaN or Inf (bf16 outputs widened to float, fp32 ones as they
// are). Shapes mix sizes that are not multiples of 8 (the scalar tails and paths: C 76,
// N 37, V 1003) with GPT-like ones (C 768, V 50257 padded to 50304), and one pointer
// offset by an element to take the unaligned path of the element-wise kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/bf16_test_util.h"

namespace etr {
namespace {

using namespace bf16_test;  // NOLINT: the helpers of every bf16 kernel test

// ---- element-wise: fill, copy, add_inplace, gelu, residual ----

class CudaBf16Pointwise : public ::testing::TestWithParam<int64_t> {};

TEST_P(CudaBf16Pointwise, FillCopyAddMatchReference) {
  ETR_REQUIRE_GPU();
  const int64_t n = GetParam();
  const std::vector<bf16> a = random_bf16(n, 1), b = random_bf16(n, 2);
  auto d_out = DeviceArray<bf16>::poisoned(n);
  std::vector<bf16> want(static_cast<size_t>(n));
  gpu().fill(d_out.data(), bf16(0.375f), n, s());
  ref().fill(want.data(), bf16(0.375f), n, nullptr);
  expect_bf16(d_out, want, "fill");

  DeviceArray<bf16> d_a(a);
  gpu().copy(d_out.data(), d_a.data(), n, s());
  expect_bf16(d_out, a, "copy");

  DeviceArray<bf16> d_acc(a), d_b(b);
  want = a;
  gpu().add_inplace(d_acc.data(), d_b.data(), n, s());
  ref().add_inplace(want.data(), b.data(), n, nullptr);
  expect_bf16(d_acc, want, "add_inplace");
}

TEST_P(CudaBf16Pointwise, GeluMatchesReference) {
  ETR_REQUIRE_GPU();
  const int64_t n = GetParam();
  const std::vector<bf16> x = random_bf16(n, 3, 3.0f), dout = random_bf16(n, 4);
  const std::vector<bf16> dinp0 = random_bf16(n, 5);
  DeviceArray<bf16> d_x(x), d_dout(dout), d_dinp(dinp0);
  auto d_out = DeviceArray<bf16>::poisoned(n);
  std::vector<bf16> out(static_cast<size_t>(n)), dinp = dinp0;
  gpu().gelu_forward(d_out.data(), d_x.data(), n, s());
  ref().gelu_forward(out.data(), x.data(), n, nullptr);
  expect_bf16(d_out, out, "gelu forward");
  gpu().gelu_backward(d_dinp.data(), d_x.data(), d_dout.data(), n, s());
  ref().gelu_backward(dinp.data(), x.data(), dout.data(), n, nullptr);
  expect_bf16(d_dinp, dinp, "gelu backward");
}

TEST_P(CudaBf16Pointwise, ResidualMatchesReferenceInPlaceToo) {
  ETR_REQUIRE_GPU();
  const int64_t n = GetParam();
  const std::vector<bf16> x1 = random_bf16(n, 6), x2 = random_bf16(n, 7), dout = random_bf16(n, 8);
  const std::vector<bf16> d1 = random_bf16(n, 9), d2 = random_bf16(n, 10);
  DeviceArray<bf16> d_x1(x1), d_x2(x2), d_dout(dout), d_d1(d1), d_d2(d2);
  auto d_out = DeviceArray<bf16>::poisoned(n);
  std::vector<bf16> out(static_cast<size_t>(n)), w1 = d1, w2 = d2;
  ref().residual_forward(out.data(), x1.data(), x2.data(), n, nullptr);
  gpu().residual_forward(d_out.data(), d_x1.data(), d_x2.data(), n, s());
  expect_bf16(d_out, out, "residual forward");
  gpu().residual_forward(d_x2.data(), d_x1.data(), d_x2.data(), n, s());  // as the layers call it
  expect_bf16(d_x2, out, "residual forward in place");
  gpu().residual_backward(d_d1.data(), d_d2.data(), d_dout.data(), n, s());
  ref().residual_backward(w1.data(), w2.data(), dout.data(), n, nullptr);
  expect_bf16(d_d1, w1, "residual dinp1");
  expect_bf16(d_d2, w2, "residual dinp2");
}

// One element past a 16-byte boundary: every pointer unaligned, the scalar path.
TEST_P(CudaBf16Pointwise, UnalignedPointersTakeTheScalarPath) {
  ETR_REQUIRE_GPU();
  const int64_t n = GetParam();
  const std::vector<bf16> x = random_bf16(n + 1, 11, 3.0f), d0 = random_bf16(n + 1, 12);
  const std::vector<bf16> dout = random_bf16(n + 1, 13);
  DeviceArray<bf16> d_x(x), d_d(d0), d_dout(dout);
  auto d_out = DeviceArray<bf16>::poisoned(n + 1);
  std::vector<bf16> out(static_cast<size_t>(n)), dinp(d0.begin() + 1, d0.end());
  gpu().gelu_forward(d_out.data() + 1, d_x.data() + 1, n, s());
  gpu().gelu_backward(d_d.data() + 1, d_x.data() + 1, d_dout.data() + 1, n, s());
  ref().gelu_forward(out.data(), x.data() + 1, n, nullptr);
  ref().gelu_backward(dinp.data(), x.data() + 1, dout.data() + 1, n, nullptr);
  std::vector<bf16> got = d_out.download(), got_d = d_d.download();
  expect_close(widen({got.begin() + 1, got.end()}), widen(out), kTol, "gelu forward unaligned");
  expect_close(widen({got_d.begin() + 1, got_d.end()}), widen(dinp), kTol, "gelu bwd unaligned");
  EXPECT_EQ(got_d[0].bits, d0[0].bits) << "the element before the range was written";
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaBf16Pointwise,
                         ::testing::Values<int64_t>(1, 37, 1003, 8 * 1024, 64 * 3072 + 5));

// ---- matmul ----

struct MatmulShape {
  int64_t N, C, OC;
};

class CudaBf16Matmul : public ::testing::TestWithParam<MatmulShape> {};

TEST_P(CudaBf16Matmul, ForwardAndBackwardMatchReference) {
  ETR_REQUIRE_GPU();
  const auto [N, C, OC] = GetParam();
  const std::vector<bf16> inp = random_bf16(N * C, 20), w = random_bf16(OC * C, 21);
  const std::vector<bf16> bias = random_bf16(OC, 22), dout = random_bf16(N * OC, 23);
  const std::vector<bf16> dinp0 = random_bf16(N * C, 24);
  const std::vector<float> dw0 = random_floats(OC * C, 25), db0 = random_floats(OC, 26);
  DeviceArray<bf16> d_inp(inp), d_w(w), d_bias(bias), d_dout(dout), d_dinp(dinp0);
  DeviceArray<float> d_dw(dw0), d_db(db0);
  for (bool with_bias : {true, false}) {
    auto d_out = DeviceArray<bf16>::poisoned(N * OC);
    std::vector<bf16> out(static_cast<size_t>(N * OC));
    gpu().matmul_forward(d_out.data(), d_inp.data(), d_w.data(),
                         with_bias ? d_bias.data() : nullptr, N, C, OC, s());
    ref().matmul_forward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, C,
                         OC, nullptr);
    expect_bf16(d_out, out, with_bias ? "matmul forward" : "matmul forward without bias");
  }
  std::vector<bf16> dinp = dinp0;
  std::vector<float> dw = dw0, db = db0;
  gpu().matmul_backward(d_dinp.data(), d_dw.data(), d_db.data(), d_dout.data(), d_inp.data(),
                        d_w.data(), N, C, OC, s());
  ref().matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                        OC, nullptr);
  expect_bf16(d_dinp, dinp, "matmul dinp");
  expect_f32(d_dw, dw, "matmul dweight");
  expect_f32(d_db, db, "matmul dbias");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaBf16Matmul,
                         ::testing::Values(MatmulShape{37, 76, 45}, MatmulShape{5, 13, 7},
                                           MatmulShape{111, 72, 216}, MatmulShape{256, 768, 2304},
                                           MatmulShape{128, 768, 1003}));

// The first layer's backward (no dinp) of a layer without bias (no dbias).
TEST(CudaBf16MatmulNulls, NullBiasAndNullDinp) {
  ETR_REQUIRE_GPU();
  const int64_t N = 37, C = 76, OC = 45;
  const std::vector<bf16> inp = random_bf16(N * C, 30), w = random_bf16(OC * C, 31);
  const std::vector<bf16> dout = random_bf16(N * OC, 32);
  const std::vector<float> dw0 = random_floats(OC * C, 33);
  DeviceArray<bf16> d_inp(inp), d_w(w), d_dout(dout);
  DeviceArray<float> d_dw(dw0);
  auto d_out = DeviceArray<bf16>::poisoned(N * OC);
  std::vector<bf16> out(static_cast<size_t>(N * OC));
  std::vector<float> dw = dw0;
  gpu().matmul_forward(d_out.data(), d_inp.data(), d_w.data(), nullptr, N, C, OC, s());
  ref().matmul_forward(out.data(), inp.data(), w.data(), nullptr, N, C, OC, nullptr);
  expect_bf16(d_out, out, "matmul forward, nullptr bias");
  gpu().matmul_backward(nullptr, d_dw.data(), nullptr, d_dout.data(), d_inp.data(), d_w.data(), N,
                        C, OC, s());
  ref().matmul_backward(nullptr, dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, C, OC,
                        nullptr);
  expect_f32(d_dw, dw, "matmul dweight, nullptr dinp and dbias");
}

// ---- layernorm ----

struct RowShape {
  int64_t N, C;
};

class CudaBf16Layernorm : public ::testing::TestWithParam<RowShape> {};

TEST_P(CudaBf16Layernorm, ForwardAndBackwardMatchReference) {
  ETR_REQUIRE_GPU();
  const auto [N, C] = GetParam();
  std::vector<bf16> inp = random_bf16(N * C, 40, 2.0f);
  for (int64_t i = 0; i < N * C; ++i) inp[i] = bf16(static_cast<float>(inp[i]) + 0.5f);
  const std::vector<bf16> w = random_bf16(C, 41), b = random_bf16(C, 42);
  const std::vector<bf16> dout = random_bf16(N * C, 43), dinp0 = random_bf16(N * C, 44);
  const std::vector<float> dw0 = random_floats(C, 45), db0 = random_floats(C, 46);
  DeviceArray<bf16> d_inp(inp), d_w(w), d_b(b), d_dout(dout), d_dinp(dinp0);
  DeviceArray<float> d_dw(dw0), d_db(db0);
  auto d_out = DeviceArray<bf16>::poisoned(N * C);
  auto d_mean = DeviceArray<float>::poisoned(N), d_rstd = DeviceArray<float>::poisoned(N);
  std::vector<bf16> out(static_cast<size_t>(N * C));
  std::vector<float> mean = zeros(N), rstd = zeros(N);
  gpu().layernorm_forward(d_out.data(), d_mean.data(), d_rstd.data(), d_inp.data(), d_w.data(),
                          d_b.data(), N, C, 1e-5, s());
  ref().layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                          C, 1e-5, nullptr);
  expect_bf16(d_out, out, "layernorm forward");
  expect_f32(d_mean, mean, "layernorm mean");
  expect_f32(d_rstd, rstd, "layernorm rstd");

  std::vector<bf16> dinp = dinp0;
  std::vector<float> dw = dw0, db = db0;
  gpu().layernorm_backward(d_dinp.data(), d_dw.data(), d_db.data(), d_dout.data(), d_inp.data(),
                           d_w.data(), d_mean.data(), d_rstd.data(), N, C, s());
  ref().layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                           mean.data(), rstd.data(), N, C, nullptr);
  expect_bf16(d_dinp, dinp, "layernorm dinp");
  expect_f32(d_dw, dw, "layernorm dweight");
  expect_f32(d_db, db, "layernorm dbias");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaBf16Layernorm,
                         ::testing::Values(RowShape{37, 76}, RowShape{3, 13}, RowShape{256, 768}));

// The parameter gradients' sums have a fixed order: two runs give the same bits.
TEST(CudaBf16Determinism, ParameterGradientsRepeatBitwise) {
  ETR_REQUIRE_GPU();
  const int64_t N = 301, C = 76, OC = 45;
  const std::vector<bf16> inp = random_bf16(N * C, 90), w = random_bf16(OC * C, 91);
  const std::vector<bf16> dout = random_bf16(N * OC, 92), dln = random_bf16(N * C, 93);
  DeviceArray<bf16> d_inp(inp), d_w(w), d_dout(dout), d_dln(dln), d_lnw(random_bf16(C, 94));
  DeviceArray<bf16> d_lnb(random_bf16(C, 95));
  auto d_ln_out = DeviceArray<bf16>::poisoned(N * C), d_dinp = DeviceArray<bf16>(dln);
  DeviceArray<float> d_mean(N), d_rstd(N);
  gpu().layernorm_forward(d_ln_out.data(), d_mean.data(), d_rstd.data(), d_inp.data(), d_lnw.data(),
                          d_lnb.data(), N, C, 1e-5, s());
  auto run = [&] {
    DeviceArray<float> dw(zeros(OC * C)), db(zeros(OC)), lnw(zeros(C)), lnb(zeros(C));
    gpu().matmul_backward(nullptr, dw.data(), db.data(), d_dout.data(), d_inp.data(), d_w.data(), N,
                          C, OC, s());
    gpu().layernorm_backward(d_dinp.data(), lnw.data(), lnb.data(), d_dln.data(), d_inp.data(),
                             d_lnw.data(), d_mean.data(), d_rstd.data(), N, C, s());
    return std::vector<std::vector<float>>{dw.download(), db.download(), lnw.download(),
                                           lnb.download()};
  };
  const auto first = run(), second = run();
  for (size_t i = 0; i < first.size(); ++i) {
    testing::expect_same_bits(second[i], first[i], "gradient " + std::to_string(i) + " rerun");
  }
}

// ---- column sums: matmul dbias, layernorm dweight and dbias ----
// These sum over rows in two stages: chunks of >= 256 rows (at most 64 chunks) summed by
// separate blocks, the partials then added in chunk order. N 1 and 37 take one chunk
// (most row lanes empty or short); N 1001 three, the last a row shorter; N 8192 (GPT-2
// 124M's B 8 x T 1024) 32, at GPT-2's widths (C 768, OC 3072). The odd widths (76, 45)
// take the scalar loads and a partly filled last column tile. Every sum is compared with
// the reference and repeated from the same starting values for the same bits.

struct ColumnSumShape {
  int64_t N, C, OC;
};

class CudaBf16ColumnSums : public ::testing::TestWithParam<ColumnSumShape> {};

TEST_P(CudaBf16ColumnSums, MatmulDbiasMatchesReferenceAndRepeatsBitwise) {
  ETR_REQUIRE_GPU();
  const ColumnSumShape shape = GetParam();
  const int64_t N = shape.N, C = shape.C, OC = shape.OC;
  const std::vector<bf16> inp = random_bf16(N * C, 100), w = random_bf16(OC * C, 101);
  const std::vector<bf16> dout = random_bf16(N * OC, 102);
  const std::vector<float> db0 = random_floats(OC, 103);
  DeviceArray<bf16> d_inp(inp), d_w(w), d_dout(dout);
  std::vector<float> db = db0;
  ref().matmul_backward(nullptr, nullptr, db.data(), dout.data(), inp.data(), w.data(), N, C, OC,
                        nullptr);
  auto run = [&] {
    DeviceArray<float> d_db(db0);
    gpu().matmul_backward(nullptr, nullptr, d_db.data(), d_dout.data(), d_inp.data(), d_w.data(), N,
                          C, OC, s());
    return d_db.download();
  };
  const std::vector<float> first = run(), second = run();
  const std::string at = "N " + std::to_string(N) + ", OC " + std::to_string(OC);
  expect_close(first, db, kTol, "matmul dbias, " + at);
  testing::expect_same_bits(second, first, "matmul dbias rerun, " + at);
}

TEST_P(CudaBf16ColumnSums, LayernormDweightDbiasMatchReferenceAndRepeatBitwise) {
  ETR_REQUIRE_GPU();
  const ColumnSumShape shape = GetParam();
  const int64_t N = shape.N, C = shape.C;
  std::vector<bf16> inp = random_bf16(N * C, 110, 2.0f);
  for (int64_t i = 0; i < N * C; ++i) inp[i] = bf16(static_cast<float>(inp[i]) + 0.5f);
  const std::vector<bf16> w = random_bf16(C, 111), b = random_bf16(C, 112);
  const std::vector<bf16> dout = random_bf16(N * C, 113), dinp0 = random_bf16(N * C, 114);
  const std::vector<float> dw0 = random_floats(C, 115), db0 = random_floats(C, 116);
  // The reference's statistics, uploaded: both backwards see the same mean and rstd.
  std::vector<bf16> out(static_cast<size_t>(N * C));
  std::vector<float> mean = zeros(N), rstd = zeros(N);
  ref().layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                          C, 1e-5, nullptr);
  std::vector<bf16> dinp = dinp0;
  std::vector<float> dw = dw0, db = db0;
  ref().layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                           mean.data(), rstd.data(), N, C, nullptr);
  DeviceArray<bf16> d_inp(inp), d_w(w), d_dout(dout);
  DeviceArray<float> d_mean(mean), d_rstd(rstd);
  auto run = [&] {
    DeviceArray<bf16> d_dinp(dinp0);
    DeviceArray<float> d_dw(dw0), d_db(db0);
    gpu().layernorm_backward(d_dinp.data(), d_dw.data(), d_db.data(), d_dout.data(), d_inp.data(),
                             d_w.data(), d_mean.data(), d_rstd.data(), N, C, s());
    return std::vector<std::vector<float>>{d_dw.download(), d_db.download(),
                                           widen(d_dinp.download())};
  };
  const auto first = run(), second = run();
  const std::string at = "N " + std::to_string(N) + ", C " + std::to_string(C);
  expect_close(first[0], dw, kTol, "layernorm dweight, " + at);
  expect_close(first[1], db, kTol, "layernorm dbias, " + at);
  expect_close(first[2], widen(dinp), kTol, "layernorm dinp, " + at);
  const char* names[] = {"dweight", "dbias", "dinp"};
  for (size_t i = 0; i < first.size(); ++i) {
    testing::expect_same_bits(second[i], first[i],
                              std::string("layernorm ") + names[i] + " rerun, " + at);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaBf16ColumnSums,
                         ::testing::Values(ColumnSumShape{1, 768, 3072},
                                           ColumnSumShape{37, 768, 3072},
                                           ColumnSumShape{1001, 76, 45},
                                           ColumnSumShape{8192, 768, 3072},
                                           ColumnSumShape{8192, 768, 768}));

// ---- encoder ----

struct EncoderShape {
  int64_t B, T, C, V, Vp;
};

class CudaBf16Encoder : public ::testing::TestWithParam<EncoderShape> {};

TEST_P(CudaBf16Encoder, ForwardAndBackwardMatchReference) {
  ETR_REQUIRE_GPU();
  const auto [B, T, C, V, Vp] = GetParam();
  const std::vector<int32_t> tokens = random_tokens(B * T, V, 50);
  const std::vector<bf16> wte = random_bf16(Vp * C, 51), wpe = random_bf16(T * C, 52);
  const std::vector<bf16> dout = random_bf16(B * T * C, 53);
  const std::vector<float> dwte0 = random_floats(Vp * C, 54), dwpe0 = random_floats(T * C, 55);
  DeviceArray<int32_t> d_tokens(tokens);
  DeviceArray<bf16> d_wte(wte), d_wpe(wpe), d_dout(dout);
  DeviceArray<float> d_dwte(dwte0), d_dwpe(dwpe0);
  auto d_out = DeviceArray<bf16>::poisoned(B * T * C);
  std::vector<bf16> out(static_cast<size_t>(B * T * C));
  gpu().encoder_forward(d_out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), B, T, C, V, s());
  ref().encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V, nullptr);
  expect_bf16(d_out, out, "encoder forward");
  std::vector<float> dwte = dwte0, dwpe = dwpe0;
  gpu().encoder_backward(d_dwte.data(), d_dwpe.data(), d_dout.data(), d_tokens.data(), B, T, C, V,
                         s());
  ref().encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, V, nullptr);
  expect_f32(d_dwte, dwte, "encoder dwte");
  expect_f32(d_dwpe, dwpe, "encoder dwpe");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaBf16Encoder,
                         ::testing::Values(EncoderShape{3, 37, 76, 101, 104},
                                           EncoderShape{4, 64, 768, 1000, 1024}));

// ---- softmax_xent ----

struct XentShape {
  int64_t N, V, Vp;
};

class CudaBf16SoftmaxXent : public ::testing::TestWithParam<XentShape> {};

TEST_P(CudaBf16SoftmaxXent, LossesAndGradientsMatchReference) {
  ETR_REQUIRE_GPU();
  const auto [N, V, Vp] = GetParam();
  const std::vector<bf16> logits = random_bf16(N * Vp, 60, 4.0f);
  std::vector<int32_t> targets = random_tokens(N, V, 61);
  targets[1] = -1;  // an ignored position
  const float dloss = 1.0f / static_cast<float>(N);
  DeviceArray<bf16> d_logits(logits);
  DeviceArray<int32_t> d_targets(targets);
  auto d_losses = DeviceArray<float>::poisoned(N);
  std::vector<float> losses = zeros(N), losses_fb = zeros(N);
  gpu().softmax_xent_forward(d_losses.data(), d_logits.data(), d_targets.data(), N, V, Vp, s());
  ref().softmax_xent_forward(losses.data(), logits.data(), targets.data(), N, V, Vp, nullptr);
  expect_f32(d_losses, losses, "softmax_xent losses");

  std::vector<bf16> dlogits(static_cast<size_t>(N * Vp));
  ref().softmax_xent_forward_backward(losses_fb.data(), dlogits.data(), logits.data(),
                                      targets.data(), dloss, N, V, Vp, nullptr);
  auto d_dlogits = DeviceArray<bf16>::poisoned(N * Vp);
  auto d_losses_fb = DeviceArray<float>::poisoned(N);
  gpu().softmax_xent_forward_backward(d_losses_fb.data(), d_dlogits.data(), d_logits.data(),
                                      d_targets.data(), dloss, N, V, Vp, s());
  expect_f32(d_losses_fb, losses_fb, "softmax_xent_forward_backward losses");
  expect_bf16(d_dlogits, dlogits, "softmax_xent dlogits");
  const std::vector<bf16> got = d_dlogits.download();
  for (int64_t v = 0; v < Vp; ++v) {
    ASSERT_EQ(got[Vp + v].bits & 0x7fff, 0) << "ignored row, column " << v;
    if (v >= V) {
      ASSERT_EQ(got[v].bits & 0x7fff, 0) << "padding column " << v;
    }
  }
  // In place: dlogits over the logits.
  gpu().softmax_xent_forward_backward(d_losses_fb.data(), d_logits.data(), d_logits.data(),
                                      d_targets.data(), dloss, N, V, Vp, s());
  expect_bf16(d_logits, dlogits, "softmax_xent dlogits in place");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaBf16SoftmaxXent,
                         ::testing::Values(XentShape{37, 1000, 1024}, XentShape{37, 1003, 1005},
                                           XentShape{8, 50257, 50304}));

// ---- sum, accumulate_mean (of fp32 losses) ----

TEST(CudaBf16Losses, SumAndAccumulateMeanMatchReference) {
  ETR_REQUIRE_GPU();
  const int64_t n = 1003;
  const std::vector<float> losses = random_floats(n, 80, 5.0f);
  DeviceArray<float> d_losses(losses);
  const double want = ref().sum(losses.data(), n, nullptr);
  EXPECT_NEAR(gpu().sum(d_losses.data(), n, s()), want, 1e-9 * (1 + std::abs(want)));
  double acc = 0.25;
  ref().accumulate_mean(&acc, losses.data(), n, 37.0, 3.0, 4.0, nullptr);
  DeviceArray<double> d_acc(std::vector<double>{0.25});
  gpu().accumulate_mean(d_acc.data(), d_losses.data(), n, 37.0, 3.0, 4.0, s());
  EXPECT_NEAR(d_acc.download()[0], acc, 1e-9 * (1 + std::abs(acc)));
}

}  // namespace
}  // namespace etr
