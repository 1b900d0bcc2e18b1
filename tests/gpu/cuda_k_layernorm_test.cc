// cuda::layernorm_forward/backward against cpu::layernorm_*<float> on the same inputs, at
// relative L2 1e-5: odd shapes (C 1, 33, 72, 100, 1600 beside 256; N not a multiple of
// the 8 rows a block takes), a shape with more rows than one launch's warps (the row loop
// strides), NaN-poisoned outputs, gradients pre-filled with random values on both sides
// (accumulation), the forward without saved statistics, N 0, bad sizes, and two runs
// giving the same bits. Skipped when no CUDA device is visible.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/kernel_test_util.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/layernorm.h"
#include "runtime/kernels/kernels.h"

namespace etr {
namespace {

using etr::testing::DeviceArray;
using etr::testing::expect_close;
using etr::testing::expect_same_bits;
using etr::testing::random_floats;
using etr::testing::stream;

constexpr double kTol = 1e-5;

struct Shape {
  int64_t N;
  int64_t C;
};

// B * T = 3 * 37 and 4 * 128; GPT-2 XL's width; C below, at and just over one warp; and
// 600001 rows, more than the 65536 blocks x 8 rows of one launch.
const Shape kShapes[] = {{3 * 37, 72}, {4 * 128, 256}, {7, 100},   {2 * 5, 1600},
                         {5, 1},       {1, 33},        {600001, 5}};

std::string name(const Shape& s) {
  return "N " + std::to_string(s.N) + ", C " + std::to_string(s.C);
}

// Inputs of one shape; the rows get different offsets so that mean and rstd vary.
struct Inputs {
  std::vector<float> inp, weight, bias;
  Inputs(const Shape& s, uint64_t seed)
      : inp(random_floats(s.N * s.C, seed, 2.0f)),
        weight(random_floats(s.C, seed + 1)),
        bias(random_floats(s.C, seed + 2)) {
    std::vector<float> offset = random_floats(s.N, seed + 3, 3.0f);
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t c = 0; c < s.C; ++c) inp[n * s.C + c] += offset[n];
  }
};

TEST(CudaLayerNorm, ForwardMatchesCpu) {
  ETR_REQUIRE_GPU();
  uint64_t seed = 10;
  for (const Shape& s : kShapes) {
    for (double eps : {cpu::kLayerNormEps, 1e-3}) {
      Inputs in(s, seed += 10);
      std::vector<float> out(s.N * s.C), mean(s.N), rstd(s.N);
      cpu::layernorm_forward<float>(out.data(), mean.data(), rstd.data(), in.inp.data(),
                                    in.weight.data(), in.bias.data(), s.N, s.C, eps);
      DeviceArray<float> d_inp(in.inp), d_w(in.weight), d_b(in.bias);
      auto d_out = DeviceArray<float>::poisoned(s.N * s.C);
      auto d_mean = DeviceArray<float>::poisoned(s.N);
      auto d_rstd = DeviceArray<float>::poisoned(s.N);
      if (eps == cpu::kLayerNormEps) {  // the overload without eps
        cuda::layernorm_forward(d_out.data(), d_mean.data(), d_rstd.data(), d_inp.data(),
                                d_w.data(), d_b.data(), s.N, s.C, stream());
      } else {
        cuda::layernorm_forward(d_out.data(), d_mean.data(), d_rstd.data(), d_inp.data(),
                                d_w.data(), d_b.data(), s.N, s.C, eps, stream());
      }
      const std::string what = name(s) + ", eps " + std::to_string(eps);
      std::vector<float> got_out = d_out.download();
      expect_close(got_out, out, kTol, "out, " + what);
      expect_close(d_mean.download(), mean, kTol, "mean, " + what);
      expect_close(d_rstd.download(), rstd, kTol, "rstd, " + what);

      // Not saving mean and rstd changes nothing else.
      auto d_out2 = DeviceArray<float>::poisoned(s.N * s.C);
      cuda::layernorm_forward(d_out2.data(), nullptr, nullptr, d_inp.data(), d_w.data(), d_b.data(),
                              s.N, s.C, eps, stream());
      expect_same_bits(d_out2.download(), got_out, "out without mean/rstd, " + what);
    }
  }
}

TEST(CudaLayerNorm, ForwardIsDeterministic) {
  ETR_REQUIRE_GPU();
  const Shape s{4 * 128, 256};
  Inputs in(s, 7);
  DeviceArray<float> d_inp(in.inp), d_w(in.weight), d_b(in.bias);
  std::vector<float> first[3];
  for (int run = 0; run < 2; ++run) {
    auto d_out = DeviceArray<float>::poisoned(s.N * s.C);
    auto d_mean = DeviceArray<float>::poisoned(s.N);
    auto d_rstd = DeviceArray<float>::poisoned(s.N);
    cuda::layernorm_forward(d_out.data(), d_mean.data(), d_rstd.data(), d_inp.data(), d_w.data(),
                            d_b.data(), s.N, s.C, stream());
    std::vector<float> got[3] = {d_out.download(), d_mean.download(), d_rstd.download()};
    for (int k = 0; k < 3; ++k) {
      if (run == 0)
        first[k] = got[k];
      else
        expect_same_bits(got[k], first[k], "forward output " + std::to_string(k));
    }
  }
}

std::vector<double> widen(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

// dweight (returned) and dbias (*dbias) from cpu::layernorm_backward<double>, rounded to float.
std::vector<float> double_reference_dweight_dbias(const Inputs& in, const std::vector<float>& dout,
                                                  const std::vector<float>& mean,
                                                  const std::vector<float>& rstd,
                                                  const std::vector<float>& dw0,
                                                  const std::vector<float>& db0, const Shape& s,
                                                  std::vector<float>* dbias) {
  std::vector<double> dinp(s.N * s.C), dw = widen(dw0), db = widen(db0);
  cpu::layernorm_backward<double>(dinp.data(), dw.data(), db.data(), widen(dout).data(),
                                  widen(in.inp).data(), widen(in.weight).data(), widen(mean).data(),
                                  widen(rstd).data(), s.N, s.C);
  *dbias = std::vector<float>(db.begin(), db.end());
  return {dw.begin(), dw.end()};
}

// Backward from the CPU's saved statistics, into gradients pre-filled with random values;
// each shape runs twice on the GPU, which must give the same bits.
TEST(CudaLayerNorm, BackwardMatchesCpuAndAccumulates) {
  ETR_REQUIRE_GPU();
  uint64_t seed = 500;
  for (const Shape& s : kShapes) {
    Inputs in(s, seed += 10);
    std::vector<float> dout = random_floats(s.N * s.C, seed + 5);
    std::vector<float> out(s.N * s.C), mean(s.N), rstd(s.N);
    cpu::layernorm_forward<float>(out.data(), mean.data(), rstd.data(), in.inp.data(),
                                  in.weight.data(), in.bias.data(), s.N, s.C);
    const std::vector<float> dinp0 = random_floats(s.N * s.C, seed + 6);
    const std::vector<float> dw0 = random_floats(s.C, seed + 7);
    const std::vector<float> db0 = random_floats(s.C, seed + 8);
    std::vector<float> dinp = dinp0, dw = dw0, db = db0;
    cpu::layernorm_backward<float>(dinp.data(), dw.data(), db.data(), dout.data(), in.inp.data(),
                                   in.weight.data(), mean.data(), rstd.data(), s.N, s.C);
    if (s.N > 100000) {
      // The float CPU kernel adds N rows one by one, and at N 600001 its dweight and dbias
      // are themselves ~1e-5 off the exact sums; the double instantiation, on the same
      // inputs and statistics, is the reference there (layernorm.h: f64 partials on the GPU).
      dw = double_reference_dweight_dbias(in, dout, mean, rstd, dw0, db0, s, &db);
    }

    DeviceArray<float> d_inp(in.inp), d_w(in.weight), d_dout(dout), d_mean(mean), d_rstd(rstd);
    std::vector<float> first[3];
    for (int run = 0; run < 2; ++run) {
      DeviceArray<float> d_dinp(dinp0), d_dw(dw0), d_db(db0);
      cuda::layernorm_backward(d_dinp.data(), d_dw.data(), d_db.data(), d_dout.data(), d_inp.data(),
                               d_w.data(), d_mean.data(), d_rstd.data(), s.N, s.C, stream());
      std::vector<float> got[3] = {d_dinp.download(), d_dw.download(), d_db.download()};
      if (run == 0) {
        expect_close(got[0], dinp, kTol, "dinp, " + name(s));
        expect_close(got[1], dw, kTol, "dweight, " + name(s));
        expect_close(got[2], db, kTol, "dbias, " + name(s));
        for (int k = 0; k < 3; ++k) first[k] = got[k];
      } else {
        for (int k = 0; k < 3; ++k)
          expect_same_bits(got[k], first[k], "backward rerun, gradient " + std::to_string(k));
      }
    }
  }
}

// The backward from the GPU's own forward statistics (the pairing a training step uses).
TEST(CudaLayerNorm, BackwardFromGpuStatistics) {
  ETR_REQUIRE_GPU();
  const Shape s{3 * 37, 72};
  Inputs in(s, 900);
  std::vector<float> dout = random_floats(s.N * s.C, 901);
  std::vector<float> out(s.N * s.C), mean(s.N), rstd(s.N);
  cpu::layernorm_forward<float>(out.data(), mean.data(), rstd.data(), in.inp.data(),
                                in.weight.data(), in.bias.data(), s.N, s.C);
  std::vector<float> dinp = random_floats(s.N * s.C, 902), dw = random_floats(s.C, 903),
                     db = random_floats(s.C, 904);
  DeviceArray<float> d_dinp(dinp), d_dw(dw), d_db(db);
  cpu::layernorm_backward<float>(dinp.data(), dw.data(), db.data(), dout.data(), in.inp.data(),
                                 in.weight.data(), mean.data(), rstd.data(), s.N, s.C);
  DeviceArray<float> d_inp(in.inp), d_w(in.weight), d_b(in.bias), d_dout(dout);
  auto d_out = DeviceArray<float>::poisoned(s.N * s.C);
  auto d_mean = DeviceArray<float>::poisoned(s.N);
  auto d_rstd = DeviceArray<float>::poisoned(s.N);
  cuda::layernorm_forward(d_out.data(), d_mean.data(), d_rstd.data(), d_inp.data(), d_w.data(),
                          d_b.data(), s.N, s.C, stream());
  cuda::layernorm_backward(d_dinp.data(), d_dw.data(), d_db.data(), d_dout.data(), d_inp.data(),
                           d_w.data(), d_mean.data(), d_rstd.data(), s.N, s.C, stream());
  expect_close(d_dinp.download(), dinp, kTol, "dinp");
  expect_close(d_dw.download(), dw, kTol, "dweight");
  expect_close(d_db.download(), db, kTol, "dbias");
}

TEST(CudaLayerNorm, ZeroRowsLeaveBuffersUntouched) {
  ETR_REQUIRE_GPU();
  const int64_t C = 72;
  const std::vector<float> a = random_floats(C, 1), b = random_floats(C, 2),
                           c = random_floats(C, 3);
  DeviceArray<float> d_a(a), d_b(b), d_c(c);
  cuda::layernorm_forward(d_a.data(), d_b.data(), d_c.data(), d_a.data(), d_b.data(), d_c.data(), 0,
                          C, stream());
  cuda::layernorm_backward(d_a.data(), d_b.data(), d_c.data(), d_a.data(), d_a.data(), d_b.data(),
                           d_c.data(), d_c.data(), 0, C, stream());
  expect_same_bits(d_a.download(), a, "out / dinp");
  expect_same_bits(d_b.download(), b, "mean / dweight");
  expect_same_bits(d_c.download(), c, "rstd / dbias");
}

TEST(CudaLayerNorm, BadSizesThrow) {
  ETR_REQUIRE_GPU();
  EXPECT_THROW(
      cuda::layernorm_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 4, 0, stream()),
      InvalidArgument);
  EXPECT_THROW(cuda::layernorm_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, -1, 8,
                                       stream()),
               InvalidArgument);
  EXPECT_THROW(cuda::layernorm_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 4, 8,
                                       0.0, stream()),
               InvalidArgument);
  EXPECT_THROW(cuda::layernorm_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                        nullptr, nullptr, 4, 0, stream()),
               InvalidArgument);
  EXPECT_THROW(cuda::layernorm_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                        nullptr, nullptr, -2, 8, stream()),
               InvalidArgument);
  CUDA_CHECK(cudaStreamSynchronize(stream()));  // nothing was enqueued that could fail
}

}  // namespace
}  // namespace etr
