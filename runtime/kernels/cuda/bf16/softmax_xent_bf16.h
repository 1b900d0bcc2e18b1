// softmax_xent of the CUDA bf16 set: softmax over the vocabulary fused with the
// cross-entropy loss, bf16 logits, fp32 math and losses; the contract of
// runtime/kernels/cpu/softmax_xent.h (fp32 twin: runtime/kernels/cuda/softmax_xent.h).
//
//   logits   [N, Vp]    bf16: V real logits, then Vp - V padding columns (never used)
//   targets  [N]        int32, device memory: in [0, V), or negative to ignore the row
//   losses   [N]        fp32, assigned: log(sum_v exp(logits[n, v])) - logits[n, target];
//                       0 for an ignored row
//
// softmax_xent_forward_backward also writes
//   dlogits  [N, Vp]    bf16, ASSIGNED: bf16((softmax - onehot(target)) dloss) for the real
//                       columns, 0 for the padding, 0 for an ignored row. May be the same
//                       buffer as logits (in place); no other overlap.
//
// One block a row; pass 1 an online (max, sum of exp) per thread, combined by a fixed
// tree (the same order every run); pass 2 writes each gradient once. 16-byte loads and
// stores when Vp % 8 == 0 and the buffers are 16-byte aligned (a vector never crosses a
// row; lanes past V are not used), scalar ones otherwise. Targets are trusted, as in the
// fp32 set: a target >= V gives a NaN loss and NaN gradients in the real columns. Device
// pointers; enqueued on `stream`, returns at once; N == 0 enqueues nothing; N < 0 or not
// 0 < V <= Vp throw etr::InvalidArgument.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/dtype.h"

namespace etr::cuda {

void softmax_xent_forward(float* losses, const bf16* logits, const int32_t* targets, int64_t N,
                          int64_t V, int64_t Vp, cudaStream_t stream);

void softmax_xent_forward_backward(float* losses, bf16* dlogits, const bf16* logits,
                                   const int32_t* targets, float dloss, int64_t N, int64_t V,
                                   int64_t Vp, cudaStream_t stream);

}  // namespace etr::cuda
