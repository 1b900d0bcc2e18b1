// layernorm: y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias over the last axis
// (GPT-2's pre-norms and final norm; eps 1e-5, biased variance, as PyTorch's LayerNorm).
//
//   inp      [N, C]     N = B * T positions
//   weight   [C]
//   bias     [C]
//   out      [N, C]     assigned; must not overlap the others
//   mean     [N]        assigned: the mean of each row          } saved for backward;
//   rstd     [N]        assigned: 1 / sqrt(var + eps) of each row } both nullptr: not saved
//
// backward, given dout [N, C] and the saved mean and rstd:
//   dinp     [N, C]     += input gradient
//   dweight  [C]        += sum over rows of dout * xhat,  xhat = (x - mean) * rstd
//   dbias    [C]        += sum over rows of dout
//
// Forward and dinp run one row per step, rows split over the threads; dweight and dbias
// are a second pass split over columns (each thread sums all N rows of its columns, in
// order), so they need no per-thread scratch and do not depend on the thread count.
#pragma once

#include <cstdint>

namespace etr::cpu {

inline constexpr double kLayerNormEps = 1e-5;

template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                       const Real* bias, int64_t N, int64_t C, double eps = kLayerNormEps);

template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                        const Real* weight, const Real* mean, const Real* rstd, int64_t N,
                        int64_t C);

}  // namespace etr::cpu
