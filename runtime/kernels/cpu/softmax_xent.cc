// softmax_xent (softmax_xent.h): logits [N, Vp], targets [N], losses [N], dlogits [N, Vp].
#include "runtime/kernels/cpu/softmax_xent.h"

#include <cmath>
#include <string>

#include "runtime/check.h"
#include "runtime/error.h"
#include "runtime/kernels/cpu/parallel.h"
#include "runtime/kernels/cpu/vec_math.h"

namespace etr::cpu {
namespace {

void check_args(const int32_t* targets, int64_t N, int64_t V, int64_t Vp) {
  ETR_CHECK(N >= 0 && V > 0 && Vp >= V) << "softmax_xent needs N >= 0 and 0 < V <= Vp (N " << N
                                        << ", V " << V << ", Vp " << Vp << ")";
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] >= V) {
      throw InvalidArgument("target " + std::to_string(targets[n]) + " at position " +
                            std::to_string(n) + " is outside the vocabulary [0, " +
                            std::to_string(V) + ")");
    }
  }
}

// The loss is log(sum) + (max - target logit): the bracket is computed first, so that
// logits far from 0 (1e4 +- 100) lose no digits of the result to rounding at their scale.
template <typename Real>
Real row_max(const Real* __restrict x, int64_t V) {
  Real m = x[0];
#pragma omp simd reduction(max : m)
  for (int64_t v = 1; v < V; ++v) m = x[v] > m ? x[v] : m;
  return m;
}

}  // namespace

template <typename Real>
void softmax_xent_forward(Real* losses, const Real* logits, const int32_t* targets, int64_t N,
                          int64_t V, int64_t Vp) {
  check_args(targets, N, V, Vp);
  detail::parallel_for(N, detail::rows_grain(Vp), [&](int64_t n) {
    if (targets[n] < 0) {
      losses[n] = 0;
      return;
    }
    const Real* __restrict x = logits + n * Vp;
    const Real m = row_max(x, V);
    Real sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < V; ++v) sum += detail::exp_nonpositive<Real>(x[v] - m);
    losses[n] = std::log(sum) + (m - x[targets[n]]);
  });
}

template <typename Real>
void softmax_xent_forward_backward(Real* losses, Real* dlogits, const Real* logits,
                                   const int32_t* targets, Real dloss, int64_t N, int64_t V,
                                   int64_t Vp) {
  check_args(targets, N, V, Vp);
  detail::parallel_for(N, detail::rows_grain(Vp), [&](int64_t n) {
    // No __restrict between x and d: dlogits may be logits. Each pass reads x[v] before
    // it writes d[v], and the target's logit is read before any write.
    const Real* x = logits + n * Vp;
    Real* d = dlogits + n * Vp;
    const int32_t target = targets[n];
    if (target < 0) {
      losses[n] = 0;
      for (int64_t v = 0; v < Vp; ++v) d[v] = 0;
      return;
    }
    const Real m = row_max(x, V);
    const Real target_logit = x[target];
    Real sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < V; ++v) {
      const Real e = detail::exp_nonpositive<Real>(x[v] - m);
      d[v] = e;
      sum += e;
    }
    losses[n] = std::log(sum) + (m - target_logit);
    const Real scale = dloss / sum;
    for (int64_t v = 0; v < V; ++v) d[v] *= scale;
    d[target] -= dloss;
    for (int64_t v = V; v < Vp; ++v) d[v] = 0;
  });
}

#define ETR_INSTANTIATE(Real)                                                                    \
  template void softmax_xent_forward<Real>(Real*, const Real*, const int32_t*, int64_t, int64_t, \
                                           int64_t);                                             \
  template void softmax_xent_forward_backward<Real>(Real*, Real*, const Real*, const int32_t*,   \
                                                    Real, int64_t, int64_t, int64_t);
ETR_INSTANTIATE(float)
ETR_INSTANTIATE(double)
#undef ETR_INSTANTIATE

}  // namespace etr::cpu
