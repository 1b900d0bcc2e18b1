// cuda::matmul_forward/backward against the CPU kernels (runtime/kernels/cpu/matmul.h) at
// relative L2 1e-5 under pedantic f32, on shapes that are not multiples of the GPU's tiles
// (N not a multiple of 128, OC not a multiple of 32), plus a GPT-sized one: assigned
// outputs poisoned with NaN, gradients pre-filled so that += is checked, each gradient
// alone bitwise what the call computing all three gives, repeated runs bitwise identical,
// empty sizes, and the TF32 default (looser, and visibly not pedantic).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/kernel_test_util.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/cublas.h"
#include "runtime/kernels/cuda/matmul.h"
#include "runtime/kernels/kernels.h"

namespace etr {
namespace {

using testing::DeviceArray;
using testing::expect_close;
using testing::expect_same_bits;
using testing::random_floats;
using testing::stream;

struct Shape {
  int64_t N, C, OC;
};

// B * T = 3 * 37 with C = 72 and OC = 3C; a tiny one; an LM-head-like odd OC; GPT-sized.
const Shape kShapes[] = {{111, 72, 216}, {5, 13, 7}, {130, 96, 1003}, {512, 256, 768}};

std::string name(const Shape& s) {
  return "N " + std::to_string(s.N) + " C " + std::to_string(s.C) + " OC " + std::to_string(s.OC);
}

struct Inputs {
  std::vector<float> inp, weight, bias, dout, dinp0, dweight0, dbias0;
  explicit Inputs(const Shape& s, uint64_t seed)
      : inp(random_floats(s.N * s.C, seed)),
        weight(random_floats(s.OC * s.C, seed + 1)),
        bias(random_floats(s.OC, seed + 2)),
        dout(random_floats(s.N * s.OC, seed + 3)),
        dinp0(random_floats(s.N * s.C, seed + 4)),
        dweight0(random_floats(s.OC * s.C, seed + 5)),
        dbias0(random_floats(s.OC, seed + 6)) {}
};

// The GPU forward on fresh NaN-poisoned output.
std::vector<float> gpu_forward(const Inputs& in, const Shape& s, bool with_bias) {
  DeviceArray<float> d_inp(in.inp), d_weight(in.weight), d_bias(in.bias);
  auto d_out = DeviceArray<float>::poisoned(s.N * s.OC);
  cuda::matmul_forward(d_out.data(), d_inp.data(), d_weight.data(),
                       with_bias ? d_bias.data() : nullptr, s.N, s.C, s.OC, stream());
  return d_out.download();
}

struct Grads {
  std::vector<float> dinp, dweight, dbias;
};

// The GPU backward from the pre-filled gradients, computing only those asked for.
Grads gpu_backward(const Inputs& in, const Shape& s, bool want_dinp, bool want_dweight,
                   bool want_dbias) {
  DeviceArray<float> d_inp(in.inp), d_weight(in.weight), d_dout(in.dout);
  DeviceArray<float> d_dinp(in.dinp0), d_dweight(in.dweight0), d_dbias(in.dbias0);
  cuda::matmul_backward(want_dinp ? d_dinp.data() : nullptr,
                        want_dweight ? d_dweight.data() : nullptr,
                        want_dbias ? d_dbias.data() : nullptr, d_dout.data(), d_inp.data(),
                        d_weight.data(), s.N, s.C, s.OC, stream());
  return {d_dinp.download(), d_dweight.download(), d_dbias.download()};
}

TEST(CudaMatmul, ForwardMatchesCpu) {
  ETR_REQUIRE_GPU();
  uint64_t seed = 10;
  for (const Shape& s : kShapes) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(name(s) + (with_bias ? " with bias" : " without bias"));
      Inputs in(s, seed += 10);
      std::vector<float> want(static_cast<size_t>(s.N * s.OC));
      cpu::matmul_forward<float>(want.data(), in.inp.data(), in.weight.data(),
                                 with_bias ? in.bias.data() : nullptr, s.N, s.C, s.OC);
      std::vector<float> got = gpu_forward(in, s, with_bias);
      expect_close(got, want, 1e-5, "matmul forward");
      expect_same_bits(gpu_forward(in, s, with_bias), got, "matmul forward rerun");
    }
  }
}

TEST(CudaMatmul, BackwardMatchesCpuAndAccumulates) {
  ETR_REQUIRE_GPU();
  uint64_t seed = 100;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    Inputs in(s, seed += 10);
    std::vector<float> dinp = in.dinp0, dweight = in.dweight0, dbias = in.dbias0;
    cpu::matmul_backward<float>(dinp.data(), dweight.data(), dbias.data(), in.dout.data(),
                                in.inp.data(), in.weight.data(), s.N, s.C, s.OC);
    Grads got = gpu_backward(in, s, true, true, true);
    expect_close(got.dinp, dinp, 1e-5, "matmul dinp");
    expect_close(got.dweight, dweight, 1e-5, "matmul dweight");
    expect_close(got.dbias, dbias, 1e-5, "matmul dbias");

    Grads again = gpu_backward(in, s, true, true, true);
    expect_same_bits(again.dinp, got.dinp, "matmul dinp rerun");
    expect_same_bits(again.dweight, got.dweight, "matmul dweight rerun");
    expect_same_bits(again.dbias, got.dbias, "matmul dbias rerun");
  }
}

// A split backward (runtime/layer.h) asks for dinp now and dweight, dbias later: each
// alone must be bitwise the all-three call's, and a gradient left out is not touched.
TEST(CudaMatmul, EachGradientAloneIsBitwiseTheFullCall) {
  ETR_REQUIRE_GPU();
  uint64_t seed = 200;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    Inputs in(s, seed += 10);
    Grads all = gpu_backward(in, s, true, true, true);
    Grads only_dinp = gpu_backward(in, s, true, false, false);
    Grads only_dweight = gpu_backward(in, s, false, true, false);
    Grads only_dbias = gpu_backward(in, s, false, false, true);
    expect_same_bits(only_dinp.dinp, all.dinp, "dinp alone");
    expect_same_bits(only_dweight.dweight, all.dweight, "dweight alone");
    expect_same_bits(only_dbias.dbias, all.dbias, "dbias alone");
    // The buffers passed as nullptr keep their pre-filled values.
    expect_same_bits(only_dinp.dweight, in.dweight0, "dweight untouched");
    expect_same_bits(only_dweight.dbias, in.dbias0, "dbias untouched");
    expect_same_bits(only_dbias.dinp, in.dinp0, "dinp untouched");
  }
}

// Empty sizes: N or OC of 0 touch nothing; C of 0 makes out the bias (or zeros) and dbias
// still sums dout. Buffers are larger than needed and pre-filled, so a stray write shows.
TEST(CudaMatmul, EmptySizes) {
  ETR_REQUIRE_GPU();
  constexpr int64_t kSentinel = 64;
  const std::vector<float> fill = random_floats(kSentinel, 300);
  DeviceArray<float> inp(random_floats(kSentinel, 301)), weight(random_floats(kSentinel, 302));
  DeviceArray<float> bias(random_floats(kSentinel, 303)), dout(random_floats(kSentinel, 304));
  DeviceArray<float> out(fill), dinp(fill), dweight(fill), dbias(fill);
  auto all_untouched = [&](const std::string& what) {
    for (DeviceArray<float>* a : {&out, &dinp, &dweight, &dbias}) {
      expect_same_bits(a->download(), fill, what);
    }
  };
  for (Shape s : {Shape{0, 5, 3}, Shape{4, 5, 0}}) {
    SCOPED_TRACE(name(s));
    cuda::matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), s.N, s.C, s.OC,
                         stream());
    cuda::matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                          weight.data(), s.N, s.C, s.OC, stream());
    all_untouched("an empty matmul");
  }

  // C == 0: out [5, 7] = bias in every row, or zeros; dbias [7] += column sums of dout.
  const Shape s{5, 0, 7};
  std::vector<float> h_bias = bias.download(), h_dout = dout.download();
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "C 0 with bias" : "C 0 without bias");
    auto d_out = DeviceArray<float>::poisoned(s.N * s.OC);
    std::vector<float> want(static_cast<size_t>(s.N * s.OC));
    cpu::matmul_forward<float>(want.data(), nullptr, nullptr, with_bias ? h_bias.data() : nullptr,
                               s.N, s.C, s.OC);
    cuda::matmul_forward(d_out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr,
                         s.N, s.C, s.OC, stream());
    expect_same_bits(d_out.download(), want, "matmul forward with C 0");
  }
  std::vector<float> want_dbias = fill;
  cpu::matmul_backward<float>(nullptr, nullptr, want_dbias.data(), h_dout.data(), nullptr, nullptr,
                              s.N, s.C, s.OC);
  cuda::matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                        weight.data(), s.N, s.C, s.OC, stream());
  std::vector<float> got_dbias = dbias.download();
  expect_close(got_dbias, want_dbias, 1e-5, "dbias with C 0");
  std::vector<float> rest(got_dbias.begin() + s.OC, got_dbias.end());
  expect_same_bits(rest, std::vector<float>(fill.begin() + s.OC, fill.end()), "dbias past OC");
  expect_same_bits(dinp.download(), fill, "dinp with C 0");
  expect_same_bits(dweight.download(), fill, "dweight with C 0");
}

TEST(CudaMatmul, NegativeSizesThrow) {
  ETR_REQUIRE_GPU();
  EXPECT_THROW(cuda::matmul_forward(nullptr, nullptr, nullptr, nullptr, -1, 4, 4, stream()),
               InvalidArgument);
  EXPECT_THROW(cuda::matmul_forward(nullptr, nullptr, nullptr, nullptr, 4, -1, 4, stream()),
               InvalidArgument);
  EXPECT_THROW(cuda::matmul_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 4, 4, -1,
                                     stream()),
               InvalidArgument);
}

// Sets pedantic f32 back when the test ends, even on a failed assertion.
struct PedanticAtExit {
  ~PedanticAtExit() { cuda::set_matmul_math(cuda::MatmulMath::kPedantic); }
};

// The default math mode: TF32 tensor cores (10-bit mantissa inputs). Close to the CPU at
// 2e-3, and visibly not the pedantic result (which agrees with the CPU to ~1e-7).
TEST(CudaMatmul, Tf32DefaultIsUsedAndClose) {
  ETR_REQUIRE_GPU();
  PedanticAtExit restore;
  const Shape s{4 * 128 + 3, 768, 768};
  Inputs in(s, 400);
  std::vector<float> want(static_cast<size_t>(s.N * s.OC));
  cpu::matmul_forward<float>(want.data(), in.inp.data(), in.weight.data(), in.bias.data(), s.N, s.C,
                             s.OC);
  std::vector<float> dinp = in.dinp0, dweight = in.dweight0, dbias = in.dbias0;
  cpu::matmul_backward<float>(dinp.data(), dweight.data(), dbias.data(), in.dout.data(),
                              in.inp.data(), in.weight.data(), s.N, s.C, s.OC);

  std::vector<float> pedantic = gpu_forward(in, s, true);
  cuda::set_matmul_math(cuda::MatmulMath::kTF32);
  ASSERT_EQ(cuda::matmul_math(), cuda::MatmulMath::kTF32);
  std::vector<float> tf32 = gpu_forward(in, s, true);
  Grads grads = gpu_backward(in, s, true, true, true);

  expect_close(pedantic, want, 1e-5, "pedantic forward");
  expect_close(tf32, want, 2e-3, "TF32 forward");
  expect_close(grads.dinp, dinp, 2e-3, "TF32 dinp");
  expect_close(grads.dweight, dweight, 2e-3, "TF32 dweight");
  expect_close(grads.dbias, dbias, 1e-5, "dbias (no product, not TF32)");
  const double tf32_error = testing::rel_l2(tf32, want);
  EXPECT_GT(tf32_error, 1e-5) << "the TF32 mode agrees with the CPU as closely as pedantic f32 "
                                 "does: cuBLAS did not use TF32 tensor cores";
  expect_same_bits(gpu_forward(in, s, true), tf32, "TF32 forward rerun");
}

}  // namespace
}  // namespace etr
