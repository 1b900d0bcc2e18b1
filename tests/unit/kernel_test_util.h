// Helpers of the CPU kernel tests (kernels_*_test.cc): random inputs, central finite
// differences, error measures.
//
// Gradient checks: L = sum(out * R) for a random R the shape of the output, so that
// dL/dout = R is what the backward is given. Every analytic gradient (the backward run
// with dout = R, into gradient buffers pre-filled with random values, which are then
// subtracted: this also checks that the backward ACCUMULATES) is compared with
//   numeric_i = (L(x_i + h) - L(x_i - h)) / ((x_i + h) - (x_i - h)),   h = kStep = 1e-5,
// in double precision, by the normwise relative error
//   max_i |analytic_i - numeric_i| / max_i max(|analytic_i|, |numeric_i|)  <  kGradTol = 1e-6.
// With h = 1e-5 the central difference's truncation error is ~h^2 |L'''| ~ 1e-10 and its
// rounding error ~1e-16 |L| / h ~ 1e-11, so 1e-6 leaves room for curvature but would
// catch any missing term or factor.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace etr::testing {

inline constexpr double kStep = 1e-5;
inline constexpr double kGradTol = 1e-6;
// The float instantiation against the double one on the same inputs, normwise relative
// error as above: float's unit roundoff is 6e-8 and these small sums have at most a few
// hundred terms, so a correct float kernel is within ~1e-6; 1e-5 fails a kernel that
// computes something else in float (a wrong accumulation type, a lost term).
inline constexpr double kFloatTol = 1e-5;

inline std::vector<double> random_vector(size_t n, std::mt19937_64& rng, double lo = -1.0,
                                         double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

inline std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// d loss / d x by central differences, perturbing x in place (restored afterwards).
template <typename F>
std::vector<double> numeric_grad(std::vector<double>& x, F&& loss) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    const double up_x = saved + kStep;
    const double down_x = saved - kStep;
    x[i] = up_x;
    const double up = loss();
    x[i] = down_x;
    const double down = loss();
    x[i] = saved;
    g[i] = (up - down) / (up_x - down_x);
  }
  return g;
}

// max |a - b| / max(max |a|, max |b|); 0 when both are all zero.
template <typename A, typename B>
double rel_error(const std::vector<A>& a, const std::vector<B>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0;
  double scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(
        {scale, std::fabs(static_cast<double>(a[i])), std::fabs(static_cast<double>(b[i]))});
  }
  return scale == 0 ? 0 : diff / scale;
}

// The accumulated gradient minus what the buffer held before the backward.
inline std::vector<double> minus(const std::vector<double>& after,
                                 const std::vector<double>& before) {
  std::vector<double> d(after.size());
  for (size_t i = 0; i < after.size(); ++i) d[i] = after[i] - before[i];
  return d;
}

}  // namespace etr::testing

// Compares an analytic with a numeric gradient (kGradTol), naming the tensor on failure,
// and prints the error (the numbers quoted in the kernels' notes come from these lines).
#define ETR_EXPECT_GRAD(name, analytic, numeric)                               \
  do {                                                                         \
    const double etr_err_ = ::etr::testing::rel_error((analytic), (numeric));  \
    EXPECT_LT(etr_err_, ::etr::testing::kGradTol) << "gradient of " << (name); \
    std::printf("[ gradient ] %-28s relative error %.2e\n", (name), etr_err_); \
  } while (0)
