// layernorm forward/backward (layernorm.h):
//   inp [N, C], weight [C], bias [C], out [N, C], mean [N], rstd [N];
//   dout [N, C], dinp [N, C], dweight [C], dbias [C].
#include "runtime/kernels/cpu/layernorm.h"

#include <algorithm>
#include <cmath>

#include "runtime/check.h"
#include "runtime/kernels/cpu/parallel.h"

namespace etr::cpu {

template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                       const Real* bias, int64_t N, int64_t C, double eps) {
  ETR_CHECK(N >= 0 && C > 0) << "layernorm needs N >= 0 and C > 0 (N " << N << ", C " << C << ")";
  ETR_CHECK(eps > 0) << "layernorm's eps must be positive, not " << eps;
  const Real inv_c = Real(1) / static_cast<Real>(C);
  const Real e = static_cast<Real>(eps);
  detail::parallel_for(N, detail::rows_grain(C), [&](int64_t n) {
    const Real* __restrict x = inp + n * C;
    Real* __restrict y = out + n * C;
    const Real* __restrict w = weight;
    const Real* __restrict b = bias;
    Real sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < C; ++i) sum += x[i];
    const Real m = sum * inv_c;
    Real sq = 0;  // two passes: no cancellation when |mean| >> std
#pragma omp simd reduction(+ : sq)
    for (int64_t i = 0; i < C; ++i) sq += (x[i] - m) * (x[i] - m);
    const Real s = Real(1) / std::sqrt(sq * inv_c + e);
    for (int64_t i = 0; i < C; ++i) y[i] = (x[i] - m) * s * w[i] + b[i];
    if (mean != nullptr) mean[n] = m;
    if (rstd != nullptr) rstd[n] = s;
  });
}

template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                        const Real* weight, const Real* mean, const Real* rstd, int64_t N,
                        int64_t C) {
  ETR_CHECK(N >= 0 && C > 0) << "layernorm needs N >= 0 and C > 0 (N " << N << ", C " << C << ")";
  const Real inv_c = Real(1) / static_cast<Real>(C);
  // dinp = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dout * weight.
  detail::parallel_for(N, detail::rows_grain(C), [&](int64_t n) {
    const Real* __restrict x = inp + n * C;
    const Real* __restrict d = dout + n * C;
    const Real* __restrict w = weight;
    Real* __restrict dx = dinp + n * C;
    const Real m = mean[n];
    const Real s = rstd[n];
    Real sum_g = 0;
    Real sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int64_t i = 0; i < C; ++i) {
      const Real g = d[i] * w[i];
      sum_g += g;
      sum_gx += g * (x[i] - m) * s;
    }
    const Real mean_g = sum_g * inv_c;
    const Real mean_gx = sum_gx * inv_c;
    for (int64_t i = 0; i < C; ++i) {
      const Real xhat = (x[i] - m) * s;
      dx[i] += s * (d[i] * w[i] - mean_g - xhat * mean_gx);
    }
  });
  // dweight, dbias: columns split over the threads, rows summed in order. (At N 1024,
  // C 256 this pass reads rows the other core just wrote, and 2 threads gain little on
  // the whole backward: 142 -> 132 us, under 1% of a training step.)
  const int64_t grain = std::max<int64_t>(16, detail::rows_grain(N));  // columns
  detail::parallel_ranges(C, 16, grain, [&](int64_t c0, int64_t c1) {
    const int64_t width = c1 - c0;
    Real* __restrict dw = dweight + c0;
    Real* __restrict db = dbias + c0;
    for (int64_t n = 0; n < N; ++n) {
      const Real* __restrict x = inp + n * C + c0;
      const Real* __restrict d = dout + n * C + c0;
      const Real m = mean[n];
      const Real s = rstd[n];
      for (int64_t i = 0; i < width; ++i) {
        dw[i] += d[i] * ((x[i] - m) * s);
        db[i] += d[i];
      }
    }
  });
}

#define ETR_INSTANTIATE(Real)                                                           \
  template void layernorm_forward<Real>(Real*, Real*, Real*, const Real*, const Real*,  \
                                        const Real*, int64_t, int64_t, double);         \
  template void layernorm_backward<Real>(Real*, Real*, Real*, const Real*, const Real*, \
                                         const Real*, const Real*, const Real*, int64_t, int64_t);
ETR_INSTANTIATE(float)
ETR_INSTANTIATE(double)
#undef ETR_INSTANTIATE

}  // namespace etr::cpu
