// Tests of runtime/kernels/cpu/matmul.h: forward against a naive triple loop (with and
// without bias, shapes that split the product by rows and by columns), backward against
// central finite differences in double precision (kernel_test_util.h states h and the
// tolerance), float against double, accumulation into the gradients, dinp = nullptr.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "runtime/kernels/cpu/matmul.h"
#include "runtime/kernels/cpu/threads.h"
#include "unit/kernel_test_util.h"

namespace etr::testing {
namespace {

using cpu::matmul_backward;
using cpu::matmul_forward;

// out[n, o] = bias[o] + sum_c inp[n, c] weight[o, c], the definition, in long double.
std::vector<double> naive_matmul(const std::vector<double>& inp, const std::vector<double>& w,
                                 const std::vector<double>* bias, int N, int C, int OC) {
  std::vector<double> out(static_cast<size_t>(N) * OC);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      long double s = bias ? (*bias)[o] : 0.0L;
      for (int c = 0; c < C; ++c) s += static_cast<long double>(inp[n * C + c]) * w[o * C + c];
      out[n * OC + o] = static_cast<double>(s);
    }
  }
  return out;
}

struct Shape {
  int N, C, OC;
};

class MatmulShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(MatmulShapes, ForwardMatchesNaiveLoops) {
  const auto [N, C, OC] = GetParam();
  std::mt19937_64 rng(1);
  auto inp = random_vector(N * C, rng);
  auto w = random_vector(OC * C, rng);
  auto bias = random_vector(OC, rng);
  for (bool with_bias : {false, true}) {
    const auto ref = naive_matmul(inp, w, with_bias ? &bias : nullptr, N, C, OC);
    std::vector<double> out(N * OC, 123.0);  // assigned: the old contents must not matter
    matmul_forward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, C, OC);
    EXPECT_LT(rel_error(out, ref), 1e-14) << "double, bias " << with_bias;
    auto inpf = to_float(inp), wf = to_float(w), biasf = to_float(bias);
    std::vector<float> outf(N * OC, 123.0f);
    matmul_forward(outf.data(), inpf.data(), wf.data(), with_bias ? biasf.data() : nullptr, N, C,
                   OC);
    EXPECT_LT(rel_error(outf, ref), kFloatTol) << "float, bias " << with_bias;
  }
}

// Odd small shapes (one thread), and shapes above the parallel threshold that split C by
// rows (N >= OC) and by columns (N < OC), run on two threads.
INSTANTIATE_TEST_SUITE_P(Shapes, MatmulShapes,
                         ::testing::Values(Shape{10, 12, 7}, Shape{1, 1, 1}, Shape{3, 5, 36},
                                           Shape{257, 64, 96}, Shape{20, 64, 300}));

class MatmulTest : public ::testing::Test {
 protected:
  void SetUp() override { cpu::set_num_threads(2); }
};

TEST_F(MatmulTest, BackwardMatchesFiniteDifferences) {
  const int N = 10, C = 12, OC = 7;  // B = 2, T = 5
  std::mt19937_64 rng(2);
  auto inp = random_vector(N * C, rng);
  auto w = random_vector(OC * C, rng);
  auto bias = random_vector(OC, rng);
  const auto R = random_vector(N * OC, rng);
  auto loss = [&] {
    std::vector<double> out(N * OC);
    matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    return dot(out, R);
  };
  const auto dinp0 = random_vector(N * C, rng), dw0 = random_vector(OC * C, rng),
             db0 = random_vector(OC, rng);
  auto dinp = dinp0, dw = dw0, db = db0;
  matmul_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(), N, C, OC);
  ETR_EXPECT_GRAD("matmul inp", minus(dinp, dinp0), numeric_grad(inp, loss));
  ETR_EXPECT_GRAD("matmul weight", minus(dw, dw0), numeric_grad(w, loss));
  ETR_EXPECT_GRAD("matmul bias", minus(db, db0), numeric_grad(bias, loss));

  // float against double, same inputs and the same pre-filled gradients
  auto inpf = to_float(inp), wf = to_float(w), Rf = to_float(R);
  auto dinpf = to_float(dinp0), dwf = to_float(dw0), dbf = to_float(db0);
  matmul_backward(dinpf.data(), dwf.data(), dbf.data(), Rf.data(), inpf.data(), wf.data(), N, C,
                  OC);
  EXPECT_LT(rel_error(dinpf, dinp), kFloatTol);
  EXPECT_LT(rel_error(dwf, dw), kFloatTol);
  EXPECT_LT(rel_error(dbf, db), kFloatTol);
}

TEST_F(MatmulTest, NullInputGradientAndNoBias) {
  const int N = 6, C = 5, OC = 4;
  std::mt19937_64 rng(3);
  auto inp = random_vector(N * C, rng);
  auto w = random_vector(OC * C, rng);
  const auto R = random_vector(N * OC, rng);
  auto loss = [&] {
    std::vector<double> out(N * OC);
    matmul_forward<double>(out.data(), inp.data(), w.data(), nullptr, N, C, OC);
    return dot(out, R);
  };
  std::vector<double> dw(OC * C, 0.0);
  matmul_backward<double>(nullptr, dw.data(), nullptr, R.data(), inp.data(), w.data(), N, C, OC);
  ETR_EXPECT_GRAD("matmul weight (no bias)", dw, numeric_grad(w, loss));
}

// Blocked gradients (runtime/grad_sink.h): rows [o0, o1) of dweight and dbias, blocks in
// any order, accumulate into the given values what one matmul_backward does (double: within
// 1e-12 relative; the gemm sums in another order), and leave every other row untouched.
TEST_F(MatmulTest, RowBlocksAccumulateWhatTheWholeBackwardDoes) {
  const int N = 7, C = 5, OC = 11;  // odd sizes; blocks of 1, 4 and 6 rows
  std::mt19937_64 rng(5);
  const auto inp = random_vector(N * C, rng), w = random_vector(OC * C, rng);
  const auto R = random_vector(N * OC, rng), dw0 = random_vector(OC * C, rng), db0 = random_vector(OC, rng);
  auto dw = dw0, db = db0;
  matmul_backward<double>(nullptr, dw.data(), db.data(), R.data(), inp.data(), w.data(), N, C, OC);
  auto bw = dw0, bb = db0;
  for (auto [o0, o1] : {std::pair{5, 11}, std::pair{0, 1}, std::pair{1, 5}}) {
    const auto before_w = bw;
    cpu::matmul_backward_rows<double>(bw.data(), bb.data(), R.data(), inp.data(), N, C, OC, o0, o1);
    for (int o = 0; o < OC; ++o) {
      if (o >= o0 && o < o1) continue;
      for (int c = 0; c < C; ++c) ASSERT_EQ(bw[o * C + c], before_w[o * C + c]) << "row " << o;
    }
  }
  EXPECT_LT(rel_error(bw, dw), 1e-12);
  EXPECT_LT(rel_error(bb, db), 1e-12);
  // The bias alone and the weight alone, each as the whole call's.
  auto only_b = db0;
  cpu::matmul_backward_rows<double>(nullptr, only_b.data(), R.data(), inp.data(), N, C, OC, 0, OC);
  EXPECT_LT(rel_error(only_b, db), 1e-12);
}

TEST_F(MatmulTest, EmptySizesDoNothing) {
  std::vector<double> out(4, 7.0), w(4, 1.0), b(4, 2.0);
  matmul_forward<double>(out.data(), nullptr, w.data(), b.data(), 0, 1, 4);
  EXPECT_EQ(out, std::vector<double>(4, 7.0));
  // C == 0: every output is its bias
  matmul_forward<double>(out.data(), nullptr, nullptr, b.data(), 1, 0, 4);
  EXPECT_EQ(out, std::vector<double>(4, 2.0));
}

}  // namespace
}  // namespace etr::testing
