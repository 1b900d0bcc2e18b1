// gelu forward/backward (gelu.h): inp [n], out [n]; dout [n], dinp [n].
#include "runtime/kernels/cpu/gelu.h"

#include <cmath>

#include "runtime/check.h"
#include "runtime/kernels/cpu/parallel.h"
#include "runtime/kernels/cpu/vec_math.h"

namespace etr::cpu {
namespace {

// Elements per thread at least: below this the OpenMP fork costs more than it saves.
constexpr int64_t kGrain = 1 << 14;

template <typename Real>
constexpr Real kSqrt2OverPi = Real(0.79788456080286535587989211986876);
template <typename Real>
constexpr Real kCubic = Real(0.044715);

}  // namespace

template <typename Real>
void gelu_forward(Real* out, const Real* inp, int64_t n) {
  ETR_CHECK_GE(n, 0);
  // No __restrict: out may be inp (each element is read once, then written).
  detail::parallel_ranges(n, 16, kGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const Real x = inp[i];
      const Real u = kSqrt2OverPi<Real> * (x + kCubic<Real> * x * x * x);
      out[i] = Real(0.5) * x * (Real(1) + detail::tanh(u));
    }
  });
}

template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, int64_t n) {
  ETR_CHECK_GE(n, 0);
  detail::parallel_ranges(n, 16, kGrain, [&](int64_t i0, int64_t i1) {
    Real* __restrict dx = dinp;
    const Real* __restrict xs = inp;
    const Real* __restrict d = dout;
    for (int64_t i = i0; i < i1; ++i) {
      const Real x = xs[i];
      const Real u = kSqrt2OverPi<Real> * (x + kCubic<Real> * x * x * x);
      const Real t = detail::tanh(u);
      const Real du = kSqrt2OverPi<Real> * (Real(1) + Real(3) * kCubic<Real> * x * x);
      const Real grad = Real(0.5) * (Real(1) + t) + Real(0.5) * x * (Real(1) - t * t) * du;
      dx[i] += grad * d[i];
    }
  });
}

#define ETR_INSTANTIATE(Real)                                    \
  template void gelu_forward<Real>(Real*, const Real*, int64_t); \
  template void gelu_backward<Real>(Real*, const Real*, const Real*, int64_t);
ETR_INSTANTIATE(float)
ETR_INSTANTIATE(double)
#undef ETR_INSTANTIATE

}  // namespace etr::cpu
