// Tests of runtime/kernels/cpu/gelu.h and residual.h: GELU against the tanh formula with
// libm's tanh (over a range that saturates the tanh), backward of both against central
// finite differences in double precision (kernel_test_util.h: h = 1e-5, tolerance 1e-6),
// float against double, in-place forwards.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/kernels/cpu/gelu.h"
#include "runtime/kernels/cpu/residual.h"
#include "runtime/kernels/cpu/threads.h"
#include "unit/kernel_test_util.h"

namespace etr::testing {
namespace {

double gelu_reference(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(Gelu, ForwardMatchesTanhFormula) {
  cpu::set_num_threads(2);
  // A grid over [-12, 12] (tanh saturates beyond ~+-4.5) plus tiny and zero arguments.
  std::vector<double> x;
  for (int i = -2400; i <= 2400; ++i) x.push_back(i * 0.005);
  for (double t : {1e-30, -1e-30, 1e-8, -1e-8, 0.0, 30.0, -30.0, 1e4, -1e4}) x.push_back(t);
  std::vector<double> y(x.size());
  cpu::gelu_forward(y.data(), x.data(), static_cast<int64_t>(x.size()));
  std::vector<float> xf = to_float(x), yf(x.size());
  cpu::gelu_forward(yf.data(), xf.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = gelu_reference(x[i]);
    // absolute error relative to max(|x|, 1): GELU is x times a value in [0, 1]
    const double scale = std::max(std::fabs(x[i]), 1.0);
    EXPECT_NEAR(y[i], ref, 1e-15 * scale) << "x = " << x[i];
    EXPECT_NEAR(yf[i], ref, 5e-7 * scale) << "x = " << x[i];
  }
  // in place
  std::vector<double> z = x;
  cpu::gelu_forward(z.data(), z.data(), static_cast<int64_t>(z.size()));
  EXPECT_EQ(z, y);
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  const int n = 2 * 5 * 4 * 12;  // B = 2, T = 5, 4C = 48
  std::mt19937_64 rng(21);
  auto x = random_vector(n, rng, -6, 6);
  const auto R = random_vector(n, rng);
  auto loss = [&] {
    std::vector<double> y(n);
    cpu::gelu_forward(y.data(), x.data(), n);
    return dot(y, R);
  };
  const auto dx0 = random_vector(n, rng);
  auto dx = dx0;
  cpu::gelu_backward(dx.data(), x.data(), R.data(), n);
  ETR_EXPECT_GRAD("gelu inp", minus(dx, dx0), numeric_grad(x, loss));

  auto xf = to_float(x), Rf = to_float(R), dxf = to_float(dx0);
  cpu::gelu_backward(dxf.data(), xf.data(), Rf.data(), n);
  EXPECT_LT(rel_error(dxf, dx), kFloatTol);
}

TEST(Residual, ForwardAndBackward) {
  const int n = 2 * 5 * 12;
  std::mt19937_64 rng(22);
  auto a = random_vector(n, rng), b = random_vector(n, rng);
  const auto R = random_vector(n, rng);
  auto loss = [&] {
    std::vector<double> y(n);
    cpu::residual_forward(y.data(), a.data(), b.data(), n);
    return dot(y, R);
  };
  std::vector<double> y(n);
  cpu::residual_forward(y.data(), a.data(), b.data(), n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(y[i], a[i] + b[i]);
  auto inplace = a;
  cpu::residual_forward(inplace.data(), inplace.data(), b.data(), n);
  EXPECT_EQ(inplace, y);

  const auto da0 = random_vector(n, rng), db0 = random_vector(n, rng);
  auto da = da0, db = db0;
  cpu::residual_backward(da.data(), db.data(), R.data(), n);
  ETR_EXPECT_GRAD("residual inp1", minus(da, da0), numeric_grad(a, loss));
  ETR_EXPECT_GRAD("residual inp2", minus(db, db0), numeric_grad(b, loss));
  // one buffer for both input gradients: += 2 dout
  auto both = da0;
  cpu::residual_backward(both.data(), both.data(), R.data(), n);
  for (int i = 0; i < n; ++i) EXPECT_DOUBLE_EQ(both[i], da0[i] + 2 * R[i]);
}

}  // namespace
}  // namespace etr::testing
