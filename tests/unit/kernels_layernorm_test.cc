// Tests of runtime/kernels/cpu/layernorm.h: forward against the definition (and the saved
// mean/rstd), backward against central finite differences in double precision
// (kernel_test_util.h: h = 1e-5, tolerance 1e-6), float against double.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/kernels/cpu/layernorm.h"
#include "runtime/kernels/cpu/threads.h"
#include "unit/kernel_test_util.h"

namespace etr::testing {
namespace {

using cpu::layernorm_backward;
using cpu::layernorm_forward;

constexpr int N = 10, C = 12;  // B = 2, T = 5

struct Inputs {
  std::vector<double> inp, w, b;
};

Inputs make_inputs(std::mt19937_64& rng) {
  Inputs in{random_vector(N * C, rng, -2, 3), random_vector(C, rng, 0.5, 1.5),
            random_vector(C, rng)};
  // rows with a large common offset: the two-pass variance must not cancel
  for (int c = 0; c < C; ++c) in.inp[3 * C + c] += 100.0;
  return in;
}

TEST(LayerNorm, ForwardMatchesDefinition) {
  cpu::set_num_threads(2);
  std::mt19937_64 rng(11);
  auto in = make_inputs(rng);
  std::vector<double> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), in.inp.data(), in.w.data(), in.b.data(),
                    N, C);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += in.inp[n * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (in.inp[n * C + c] - m) * (in.inp[n * C + c] - m);
    v /= C;  // biased, as PyTorch
    const double s = 1 / std::sqrt(v + 1e-5);
    EXPECT_NEAR(mean[n], m, 1e-12 * std::fabs(m) + 1e-15);
    EXPECT_NEAR(rstd[n], s, 1e-12 * s);
    for (int c = 0; c < C; ++c) {
      const double y = (in.inp[n * C + c] - m) * s * in.w[c] + in.b[c];
      EXPECT_NEAR(out[n * C + c], y, 1e-12);
    }
  }
  // float on the same inputs, including the offset row
  auto inpf = to_float(in.inp), wf = to_float(in.w), bf = to_float(in.b);
  std::vector<float> outf(N * C), meanf(N), rstdf(N);
  layernorm_forward(outf.data(), meanf.data(), rstdf.data(), inpf.data(), wf.data(), bf.data(), N,
                    C);
  // The offset row's inputs lose ~100 * 6e-8 in the conversion to float alone; the
  // normalised output amplifies that by rstd (~1): compare to the double result with the
  // float tolerance scaled accordingly.
  EXPECT_LT(rel_error(outf, out), 100 * kFloatTol);
  std::vector<float> out_no_stats(N * C);
  layernorm_forward<float>(out_no_stats.data(), nullptr, nullptr, inpf.data(), wf.data(), bf.data(),
                           N, C);
  EXPECT_EQ(out_no_stats, outf);
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  cpu::set_num_threads(2);
  std::mt19937_64 rng(12);
  auto in = make_inputs(rng);
  const auto R = random_vector(N * C, rng);
  auto loss = [&] {
    std::vector<double> out(N * C);
    layernorm_forward<double>(out.data(), nullptr, nullptr, in.inp.data(), in.w.data(), in.b.data(),
                              N, C);
    return dot(out, R);
  };
  std::vector<double> out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), in.inp.data(), in.w.data(), in.b.data(),
                    N, C);
  const auto dinp0 = random_vector(N * C, rng), dw0 = random_vector(C, rng),
             db0 = random_vector(C, rng);
  auto dinp = dinp0, dw = dw0, db = db0;
  layernorm_backward(dinp.data(), dw.data(), db.data(), R.data(), in.inp.data(), in.w.data(),
                     mean.data(), rstd.data(), N, C);
  ETR_EXPECT_GRAD("layernorm inp", minus(dinp, dinp0), numeric_grad(in.inp, loss));
  ETR_EXPECT_GRAD("layernorm weight", minus(dw, dw0), numeric_grad(in.w, loss));
  ETR_EXPECT_GRAD("layernorm bias", minus(db, db0), numeric_grad(in.b, loss));

  // float against double (without the offset row, which float cannot resolve to 1e-5)
  for (int c = 0; c < C; ++c) in.inp[3 * C + c] -= 100.0;
  layernorm_forward(out.data(), mean.data(), rstd.data(), in.inp.data(), in.w.data(), in.b.data(),
                    N, C);
  dinp = dinp0, dw = dw0, db = db0;
  layernorm_backward(dinp.data(), dw.data(), db.data(), R.data(), in.inp.data(), in.w.data(),
                     mean.data(), rstd.data(), N, C);
  auto inpf = to_float(in.inp), wf = to_float(in.w), bf = to_float(in.b), Rf = to_float(R);
  std::vector<float> outf(N * C), meanf(N), rstdf(N);
  layernorm_forward(outf.data(), meanf.data(), rstdf.data(), inpf.data(), wf.data(), bf.data(), N,
                    C);
  auto dinpf = to_float(dinp0), dwf = to_float(dw0), dbf = to_float(db0);
  layernorm_backward(dinpf.data(), dwf.data(), dbf.data(), Rf.data(), inpf.data(), wf.data(),
                     meanf.data(), rstdf.data(), N, C);
  EXPECT_LT(rel_error(outf, out), kFloatTol);
  EXPECT_LT(rel_error(dinpf, dinp), kFloatTol);
  EXPECT_LT(rel_error(dwf, dw), kFloatTol);
  EXPECT_LT(rel_error(dbf, db), kFloatTol);
}

}  // namespace
}  // namespace etr::testing
