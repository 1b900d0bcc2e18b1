// attention forward/backward (attention.h):
//   qkv [B, T, 3C], att [B, NH, T, T], out [B, T, C];
//   dout [B, T, C], dqkv [B, T, 3C], scratch [threads, kAttentionRows, T].
#include "runtime/kernels/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "runtime/check.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/kernels/cpu/parallel.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/kernels/cpu/vec_math.h"

namespace etr::cpu {
namespace {

constexpr int64_t kRows = kAttentionRows;

// (b, h) pairs per thread at least: about 2^16 multiply-adds, so that tiny problems (the
// tests' T = 5) run without forking.
int64_t pairs_grain(int64_t T, int64_t hs) {
  return std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, T * T * hs));
}

void check_sizes(int64_t B, int64_t T, int64_t C, int64_t NH) {
  ETR_CHECK(B >= 0 && T >= 0 && C > 0 && NH > 0)
      << "attention needs B, T >= 0 and C, NH > 0 (B " << B << ", T " << T << ", C " << C << ", NH "
      << NH << ")";
  ETR_CHECK(C % NH == 0) << "attention's width C = " << C << " is not a multiple of the " << NH
                         << " heads";
  ETR_CHECK(3 * C <= INT_MAX && T <= INT_MAX) << "attention sizes do not fit OpenBLAS's int";
}

// Row t of a block of S (keys [0, L)): softmax over [0, t] in place, zero over (t, T).
template <typename Real>
void causal_softmax_row(Real* __restrict row, int64_t t, int64_t T) {
  Real m = row[0];
#pragma omp simd reduction(max : m)
  for (int64_t s = 1; s <= t; ++s) m = row[s] > m ? row[s] : m;
  Real sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t s = 0; s <= t; ++s) {
    row[s] = detail::exp_nonpositive<Real>(row[s] - m);
    sum += row[s];
  }
  const Real inv = Real(1) / sum;
  for (int64_t s = 0; s <= t; ++s) row[s] *= inv;
  for (int64_t s = t + 1; s < T; ++s) row[s] = 0;
}

// Row t of the softmax backward, in place over dp[0, L): dp = p * (dp - sum(p * dp)).
// p is 0 beyond t, so the product zeroes dp there.
template <typename Real>
void softmax_backward_row(Real* __restrict dp, const Real* __restrict p, int64_t t, int64_t L) {
  Real dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t s = 0; s <= t; ++s) dot += p[s] * dp[s];
  for (int64_t s = 0; s <= t; ++s) dp[s] = p[s] * (dp[s] - dot);
  for (int64_t s = t + 1; s < L; ++s) dp[s] = 0;
}

template <typename Real>
void forward_head(Real* out, Real* att, const Real* qkv, int64_t b, int64_t h, int64_t T, int64_t C,
                  int64_t NH) {
  const int64_t hs = C / NH;
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(hs));
  const Real* q = qkv + b * T * 3 * C + h * hs;  // rows of stride 3C
  const Real* k = q + C;
  const Real* v = q + 2 * C;
  Real* a = att + (b * NH + h) * T * T;  // [T, T]
  Real* o = out + b * T * C + h * hs;    // rows of stride C
  for (int64_t r0 = 0; r0 < T; r0 += kRows) {
    const int64_t r1 = std::min(T, r0 + kRows);
    // a[r0:r1, 0:r1] = scale * Q[r0:r1] . K[0:r1]^T
    detail::gemm<Real>(false, true, r1 - r0, r1, hs, scale, q + r0 * 3 * C, 3 * C, k, 3 * C,
                       Real(0), a + r0 * T, T);
    for (int64_t t = r0; t < r1; ++t) causal_softmax_row(a + t * T, t, T);
    // out[r0:r1] = a[r0:r1, 0:r1] . V[0:r1]
    detail::gemm<Real>(false, false, r1 - r0, hs, r1, Real(1), a + r0 * T, T, v, 3 * C, Real(0),
                       o + r0 * C, C);
  }
}

template <typename Real>
void backward_head(Real* dqkv, Real* dp, const Real* dout, const Real* qkv, const Real* att,
                   int64_t b, int64_t h, int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(hs));
  const int64_t row = b * T * 3 * C + h * hs;
  const Real* q = qkv + row;
  const Real* k = q + C;
  const Real* v = q + 2 * C;
  Real* dq = dqkv + row;
  Real* dk = dq + C;
  Real* dv = dq + 2 * C;
  const Real* a = att + (b * NH + h) * T * T;
  const Real* d = dout + b * T * C + h * hs;
  for (int64_t r0 = 0; r0 < T; r0 += kRows) {
    const int64_t r1 = std::min(T, r0 + kRows);
    const int64_t rows = r1 - r0;
    const int64_t L = r1;  // keys [0, r1); dp is [rows, L]
    // dP = dO[r0:r1] . V[0:L]^T
    detail::gemm<Real>(false, true, rows, L, hs, Real(1), d + r0 * C, C, v, 3 * C, Real(0), dp, L);
    // dV[0:L] += att[r0:r1, 0:L]^T . dO[r0:r1]
    detail::gemm<Real>(true, false, L, hs, rows, Real(1), a + r0 * T, T, d + r0 * C, C, Real(1), dv,
                       3 * C);
    for (int64_t t = r0; t < r1; ++t) softmax_backward_row(dp + (t - r0) * L, a + t * T, t, L);
    // dQ[r0:r1] += scale dS . K[0:L];  dK[0:L] += scale dS^T . Q[r0:r1]
    detail::gemm<Real>(false, false, rows, hs, L, scale, dp, L, k, 3 * C, Real(1), dq + r0 * 3 * C,
                       3 * C);
    detail::gemm<Real>(true, false, L, hs, rows, scale, dp, L, q + r0 * 3 * C, 3 * C, Real(1), dk,
                       3 * C);
  }
}

}  // namespace

int64_t attention_backward_scratch_size(int64_t T, int threads) {
  return std::max(1, threads) * std::min(T, kRows) * T;
}

template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH) {
  check_sizes(B, T, C, NH);
  ensure_blas_single_threaded();
  detail::parallel_for(B * NH, pairs_grain(T, C / NH), [&](int64_t bh) {
    forward_head(out, att, qkv, bh / NH, bh % NH, T, C, NH);
  });
}

template <typename Real>
void attention_backward(Real* dqkv, Real* scratch, int64_t scratch_size, const Real* dout,
                        const Real* qkv, const Real* att, int64_t B, int64_t T, int64_t C,
                        int64_t NH) {
  check_sizes(B, T, C, NH);
  if (B == 0 || T == 0) return;
  const int64_t per_thread = attention_backward_scratch_size(T, 1);
  ETR_CHECK(scratch != nullptr && scratch_size >= per_thread)
      << "attention_backward needs at least " << per_thread << " elements of scratch for T = " << T
      << ", got " << scratch_size;
  ensure_blas_single_threaded();
  const int64_t pairs = B * NH;
  const int p = static_cast<int>(std::min<int64_t>(
      {detail::threads_for(pairs, pairs_grain(T, C / NH)), scratch_size / per_thread}));
  if (p == 1) {
    for (int64_t bh = 0; bh < pairs; ++bh) {
      backward_head(dqkv, scratch, dout, qkv, att, bh / NH, bh % NH, T, C, NH);
    }
    return;
  }
#pragma omp parallel num_threads(p)
  {
    Real* dp = scratch + omp_get_thread_num() * per_thread;
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      backward_head(dqkv, dp, dout, qkv, att, bh / NH, bh % NH, T, C, NH);
    }
  }
}

#define ETR_INSTANTIATE(Real)                                                                 \
  template void attention_forward<Real>(Real*, Real*, const Real*, int64_t, int64_t, int64_t, \
                                        int64_t);                                             \
  template void attention_backward<Real>(Real*, Real*, int64_t, const Real*, const Real*,     \
                                         const Real*, int64_t, int64_t, int64_t, int64_t);
ETR_INSTANTIATE(float)
ETR_INSTANTIATE(double)
#undef ETR_INSTANTIATE

}  // namespace etr::cpu
