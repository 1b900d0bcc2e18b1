// matmul: a linear layer, out = inp . weight^T + bias (llm.c's matmul; the QKV, attention
// projection, MLP and tied LM-head products of the GPT).
//
//   inp      [N, C]     N = B * T positions
//   weight   [OC, C]    row o holds the C input weights of output o (PyTorch's Linear)
//   bias     [OC]       nullptr: no bias
//   out      [N, OC]    assigned; must not overlap inp, weight or bias
//
// backward, given dout [N, OC]:
//   dinp     [N, C]     += dout . weight              nullptr: not needed
//   dweight  [OC, C]    += dout^T . inp               nullptr: not needed
//   dbias    [OC]       += column sums of dout        nullptr: no bias
//
// The three gradients are independent products of dout: any of them may be left out
// (nullptr) and the others are bitwise what one call computing all three gives. A split
// backward (runtime/layer.h) computes dinp now and dweight, dbias later that way.
// The products are OpenBLAS sgemm/dgemm, each split over the threads (blas.h); the bias
// gradient is split by columns, so it sums the N rows in order on one thread.
#pragma once

#include <cstdint>

namespace etr::cpu {

template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int64_t N,
                    int64_t C, int64_t OC);

template <typename Real>
void matmul_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, int64_t N, int64_t C, int64_t OC);

}  // namespace etr::cpu
