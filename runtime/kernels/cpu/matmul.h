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

// Rows [o0, o1) of matmul_backward's dweight and dbias (either nullptr: not needed):
//   dweight[o, :] += dout[:, o]^T . inp,  dbias[o] += column sum of dout[:, o],  o0 <= o < o1
// `dweight` and `dbias` are the whole tensors ([OC, C], [OC]). ZeRO's blocked gradients
// (runtime/grad_sink.h) compute a large weight's gradient a block of rows at a time, so
// that at most a block of it exists before its reduce-scatter; summed in another order
// than the whole product (within rounding, not bitwise).
template <typename Real>
void matmul_backward_rows(Real* dweight, Real* dbias, const Real* dout, const Real* inp, int64_t N,
                          int64_t C, int64_t OC, int64_t o0, int64_t o1);

}  // namespace etr::cpu
