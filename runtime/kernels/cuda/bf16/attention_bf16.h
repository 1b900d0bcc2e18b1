// attention of the CUDA bf16 set: GPT-2's causal multi-head self-attention on bf16
// activations; the contract of runtime/kernels/cpu/attention.h and the computation of the
// fp32 set's runtime/kernels/cuda/attention.h (cuBLAS strided-batched products, one
// sequence's NH heads a product, a warp-per-row causal softmax), with bf16 buffers.
// NH heads of size hs = C / NH; scale 1 / sqrt(hs).
//
//   qkv      [B, T, 3C]    bf16: q, k, v in columns [0, C), [C, 2C), [2C, 3C)
//   att      [B, NH, T, T] bf16, assigned, saved for backward: the causal softmax of
//                          scale q_t . k_s over s <= t, exactly 0 for s > t
//   out      [B, T, C]     bf16, assigned: att V
//
// backward, given dout [B, T, C] (bf16) and the forward's qkv and att:
//   dqkv     [B, T, 3C]    bf16 += gradient of q, k and v
//   scratch  [attention_backward_scratch_size(B, T, C, NH)] = [NH, T, T] bf16, temporary
//
// Precision: the products are cublasGemmStridedBatchedEx with bf16 A, B and C and
// CUBLAS_COMPUTE_32F (fp32 accumulation, one rounding of each output, += outputs rounded
// once with beta = 1). The scores S are written to att in bf16 by the first product and
// the softmax reads them back, computing max, exponentials and sum in fp32 and rounding
// each probability once; likewise dP (in scratch) is bf16 between its product and the
// softmax backward, which computes dS = att (dP - sum att dP) in fp32 and stores it bf16
// in place. So unlike the CPU reference (fp32 throughout, rounded at the end) the scores
// and dP are rounded to bf16 once on the way: a relative error about 2^-9 |S| in the
// probabilities, within the set's 1e-2 for scores of moderate size.
//
// Every sum has a fixed order (cuBLAS's, bitwise reproducible on one GPU model and
// version, and the warp butterflies): two runs give the same bits. Device pointers;
// enqueued on `stream`, returns at once; B == 0 or T == 0 enqueues nothing. Bad sizes
// (as the fp32 set's) and too little scratch throw etr::InvalidArgument.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/dtype.h"

namespace etr::cuda {

// Elements (bf16) of scratch the bf16 attention_backward needs: NH T T (0 when B or T is 0).
int64_t attention_backward_scratch_size_bf16(int64_t B, int64_t T, int64_t C, int64_t NH);

void attention_forward(bf16* out, bf16* att, const bf16* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, cudaStream_t stream);

void attention_backward(bf16* dqkv, bf16* scratch, int64_t scratch_size, const bf16* dout,
                        const bf16* qkv, const bf16* att, int64_t B, int64_t T, int64_t C,
                        int64_t NH, cudaStream_t stream);

}  // namespace etr::cuda
