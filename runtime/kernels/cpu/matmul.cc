// matmul forward/backward (matmul.h):
//   inp [N, C], weight [OC, C], bias [OC], out [N, OC]; dout [N, OC], dinp [N, C],
//   dweight [OC, C], dbias [OC].
#include "runtime/kernels/cpu/matmul.h"

#include <algorithm>

#include "runtime/check.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/kernels/cpu/parallel.h"

namespace etr::cpu {
namespace {

void check_sizes(int64_t N, int64_t C, int64_t OC) {
  ETR_CHECK(N >= 0 && C >= 0 && OC >= 0)
      << "matmul sizes must be non-negative (N " << N << ", C " << C << ", OC " << OC << ")";
}

}  // namespace

template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int64_t N,
                    int64_t C, int64_t OC) {
  check_sizes(N, C, OC);
  if (N == 0 || OC == 0) return;
  // out = bias in every row, then out += inp . weight^T (beta 1); without a bias beta 0.
  if (bias != nullptr) {
    detail::parallel_for(N, detail::rows_grain(OC), [&](int64_t n) {
      Real* __restrict o = out + n * OC;
      const Real* __restrict b = bias;
      for (int64_t j = 0; j < OC; ++j) o[j] = b[j];
    });
  }
  detail::parallel_gemm<Real>(false, true, N, OC, C, Real(1), inp, C, weight, C,
                              bias != nullptr ? Real(1) : Real(0), out, OC);
}

template <typename Real>
void matmul_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, int64_t N, int64_t C, int64_t OC) {
  check_sizes(N, C, OC);
  if (N == 0) return;
  // dinp [N, C] += dout [N, OC] . weight [OC, C]
  if (dinp != nullptr) {
    detail::parallel_gemm<Real>(false, false, N, C, OC, Real(1), dout, OC, weight, C, Real(1), dinp,
                                C);
  }
  // dweight [OC, C] += dout^T [OC, N] . inp [N, C]
  if (dweight != nullptr) {
    detail::parallel_gemm<Real>(true, false, OC, C, N, Real(1), dout, OC, inp, C, Real(1),
                                dweight, C);
  }
  // dbias [OC] += sum over rows of dout; each thread owns a range of columns.
  if (dbias != nullptr) {
    const int64_t grain = std::max<int64_t>(16, detail::rows_grain(N));  // columns
    detail::parallel_ranges(OC, 16, grain, [&](int64_t o0, int64_t o1) {
      Real* __restrict db = dbias + o0;
      const int64_t w = o1 - o0;
      for (int64_t n = 0; n < N; ++n) {
        const Real* __restrict d = dout + n * OC + o0;
        for (int64_t j = 0; j < w; ++j) db[j] += d[j];
      }
    });
  }
}

template <typename Real>
void matmul_backward_rows(Real* dweight, Real* dbias, const Real* dout, const Real* inp, int64_t N,
                          int64_t C, int64_t OC, int64_t o0, int64_t o1) {
  check_sizes(N, C, OC);
  ETR_CHECK(0 <= o0 && o0 <= o1 && o1 <= OC) << "rows [" << o0 << ", " << o1 << ") of " << OC;
  const int64_t M = o1 - o0;
  if (N == 0 || M == 0) return;
  // dweight[o0:o1] [M, C] += dout[:, o0:o1]^T [M, N] . inp [N, C] (lda OC)
  if (dweight != nullptr) {
    detail::parallel_gemm<Real>(true, false, M, C, N, Real(1), dout + o0, OC, inp, C, Real(1),
                                dweight + o0 * C, C);
  }
  if (dbias != nullptr) {
    Real* __restrict db = dbias + o0;
    for (int64_t n = 0; n < N; ++n) {
      const Real* __restrict d = dout + n * OC + o0;
      for (int64_t j = 0; j < M; ++j) db[j] += d[j];
    }
  }
}

#define ETR_INSTANTIATE(Real)                                                                     \
  template void matmul_forward<Real>(Real*, const Real*, const Real*, const Real*, int64_t,       \
                                     int64_t, int64_t);                                           \
  template void matmul_backward<Real>(Real*, Real*, Real*, const Real*, const Real*, const Real*, \
                                      int64_t, int64_t, int64_t);                               \
  template void matmul_backward_rows<Real>(Real*, Real*, const Real*, const Real*, int64_t,       \
                                           int64_t, int64_t, int64_t, int64_t);
ETR_INSTANTIATE(float)
ETR_INSTANTIATE(double)
#undef ETR_INSTANTIATE

}  // namespace etr::cpu
