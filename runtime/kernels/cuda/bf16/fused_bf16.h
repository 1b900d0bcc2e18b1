// Two fused forwards of the CUDA bf16 set: each computes what a pair of its unfused
// kernels computes (the compositions below), in one pass where it can.
//
// residual_layernorm_forward: the block's residual add and the next LayerNorm,
//   residual_forward(x1, inp1, inp2) ; layernorm_forward(y, mean, rstd, x1, weight, bias)
//
//   inp1     [N, C]     bf16
//   inp2     [N, C]     bf16
//   x1       [N, C]     bf16, assigned: bf16(inp1 + inp2), rounded once; may be the same
//                       buffer as inp1 or inp2 (the layers pass x1 == inp2); no other overlap
//   weight   [C]        bf16
//   bias     [C]        bf16
//   y        [N, C]     bf16, assigned: LayerNorm of the ROUNDED x1 rows, fp32 math,
//                       rounded once; must not overlap the others
//   mean     [N]        fp32, assigned } saved for layernorm_backward (on x1);
//   rstd     [N]        fp32, assigned } both nullptr: not saved
//
//   One kernel, one warp a row (layernorm_bf16.h's scheme: lane partial sums, a warp
//   butterfly, the variance in two passes). The warp writes x1 to global memory once and
//   keeps the rounded row in shared memory (bf16: it is exact), from which the statistics
//   and y are computed: x1 is never read back from global memory. 16-byte loads and
//   stores when C % 8 == 0 and every pointer is 16-byte aligned, else scalar. Each lane
//   reads and writes only its own elements, so x1 aliasing inp1 or inp2 is safe. Rows of
//   more than 24576 values (48 KiB of shared memory) take the composition instead.
//
// matmul_gelu_forward: the MLP's first linear layer and its GELU,
//   matmul_forward(pre, inp, weight, bias) ; gelu_forward(out, pre)
//
//   inp      [N, C]     bf16
//   weight   [OC, C]    bf16
//   bias     [OC]       bf16; nullptr: no bias (then the composition, see below)
//   pre      [N, OC]    bf16, assigned: bf16(fp32 product + bias), the GELU's input,
//                       saved for gelu_backward
//   out      [N, OC]    bf16, assigned: bf16(gelu(pre)), GPT-2's tanh GELU; must not
//                       overlap pre (if it does, the composition runs)
//
//   One cublasLtMatmul with CUBLASLT_EPILOGUE_GELU_AUX_BIAS: fp32 accumulation, the bias
//   added to the fp32 product, the sum stored rounded to bf16 as the AUX output (pre) and
//   GELU applied to the fp32 sum, rounded to bf16 once (out). So out = bf16(gelu(p)) where
//   the composition computes bf16(gelu(bf16(p))): the two can differ by a bf16 ulp. Which
//   GELU cuBLASLt computes is not spelled out in its documentation ("x := GELU(x)");
//   PyTorch and llm.c use this epilogue as the tanh approximation (PyTorch's non-Lt path
//   for the same op applies gelu(..., "tanh")), and the tests compare it with GPT-2's.
//   The epilogue is used when: bias != nullptr and 16-byte aligned, pre 16-byte aligned,
//   OC % 8 == 0 (cuBLASLt: the AUX leading dimension, OC, must be a multiple of 8),
//   C > 0, pre and out disjoint, and cuBLASLt's heuristic offers an algorithm. Otherwise
//   the composition: matmul_bf16.h's matmul_forward into pre, then pointwise_bf16.h's
//   gelu_forward into out (bitwise what the unfused kernels give).
//
// Determinism: every order is fixed by the sizes and the pointers' alignments (the
// LayerNorm's sums; cuBLASLt's algorithm is its heuristic's first choice for the call's
// shapes, types and alignments), so two runs give the same bits on one GPU model and
// library version. Whether the fused path or the composition runs depends only on the
// sizes and pointers, never on earlier calls.
//
// Device pointers; enqueued on `stream`, returns at once; N == 0 enqueues nothing.
// residual_layernorm_forward: N < 0, C < 1 or eps <= 0 throw etr::InvalidArgument.
// matmul_gelu_forward: sizes outside [0, 2^31) throw etr::InvalidArgument; C == 0 gives
// pre = bias (or 0) and out = gelu(pre), as the composition does.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/dtype.h"

namespace etr::cuda {

void residual_layernorm_forward(bf16* x1, bf16* y, float* mean, float* rstd, const bf16* inp1,
                                const bf16* inp2, const bf16* weight, const bf16* bias, int64_t N,
                                int64_t C, double eps, cudaStream_t stream);

void matmul_gelu_forward(bf16* pre, bf16* out, const bf16* inp, const bf16* weight,
                         const bf16* bias, int64_t N, int64_t C, int64_t OC, cudaStream_t stream);

}  // namespace etr::cuda
