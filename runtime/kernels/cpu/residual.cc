// residual forward/backward (residual.h): inp1 [n], inp2 [n], out [n]; dout [n],
// dinp1 [n], dinp2 [n].
#include "runtime/kernels/cpu/residual.h"

#include "runtime/check.h"
#include "runtime/kernels/cpu/parallel.h"

namespace etr::cpu {
namespace {

constexpr int64_t kGrain = 1 << 15;

}  // namespace

template <typename Real>
void residual_forward(Real* out, const Real* inp1, const Real* inp2, int64_t n) {
  ETR_CHECK_GE(n, 0);
  // No __restrict: out may be inp1 or inp2 (same index read, then written).
  detail::parallel_ranges(n, 16, kGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = inp1[i] + inp2[i];
  });
}

template <typename Real>
void residual_backward(Real* dinp1, Real* dinp2, const Real* dout, int64_t n) {
  ETR_CHECK_GE(n, 0);
  detail::parallel_ranges(n, 16, kGrain, [&](int64_t i0, int64_t i1) {
    const Real* __restrict d = dout;
    if (dinp1 == dinp2) {
      Real* __restrict dx = dinp1;
      for (int64_t i = i0; i < i1; ++i) dx[i] += Real(2) * d[i];
      return;
    }
    Real* __restrict dx1 = dinp1;
    Real* __restrict dx2 = dinp2;
    for (int64_t i = i0; i < i1; ++i) {
      dx1[i] += d[i];
      dx2[i] += d[i];
    }
  });
}

#define ETR_INSTANTIATE(Real)                                                     \
  template void residual_forward<Real>(Real*, const Real*, const Real*, int64_t); \
  template void residual_backward<Real>(Real*, Real*, const Real*, int64_t);
ETR_INSTANTIATE(float)
ETR_INSTANTIATE(double)
#undef ETR_INSTANTIATE

}  // namespace etr::cpu
