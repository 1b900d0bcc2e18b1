// softmax_xent on the GPU: softmax over the vocabulary fused with the cross-entropy loss,
// the float instantiation of runtime/kernels/cpu/softmax_xent.h (padded vocabulary,
// ignore index) on device pointers, enqueued on `stream` (returns at once).
//
//   logits   [N, Vp]    row n: V real logits, then Vp - V padding columns; the padding is
//                       never read, whatever it holds
//   targets  [N]        int32, device memory: the next token in [0, V), or negative for a
//                       position that is ignored (loss 0, zero gradient)
//   losses   [N]        assigned: log(sum_v exp(logits[n, v])) - logits[n, targets[n]]
//
// softmax_xent_forward_backward also computes, in the same pass over each row,
//   dlogits  [N, Vp]    ASSIGNED: (softmax(logits[n, :V]) - onehot(targets[n])) * dloss for
//                       the real columns, 0 for the padding, 0 for an ignored row. May be
//                       the same buffer as logits (in place); no other overlap.
//   dloss               the gradient of the training loss with respect to each position's
//                       loss (a host scalar, as on the CPU)
//
// Differences from the CPU versions:
// - Targets live on the device and are TRUSTED: reading them on the host would need a
//   synchronisation. Only the sizes are checked (N >= 0, 0 < V <= Vp; etr::InvalidArgument
//   otherwise). A target >= V is not read out of range: its row gets a NaN loss (and NaN
//   gradients in the real columns), so that the mistake shows in the loss.
// - One block per row. The row's maximum and sum of exponentials are found in one pass
//   (online softmax: each thread keeps its running maximum and a sum rescaled whenever the
//   maximum grows), then combined by a fixed tree; everything in fp32, as the CPU's float
//   instantiation sums in float. The order differs from the CPU's, so results agree to
//   rounding (~1e-6 relative), not bitwise; it is fixed, so repeated runs are bitwise equal.
// - exp is CUDA's expf (full range, no clamping): where x - max < -87 the CPU returns
//   e^-87 and the GPU the true (subnormal or zero) value, a difference below 1e-37.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace etr::cuda {

void softmax_xent_forward(float* losses, const float* logits, const int32_t* targets, int64_t N,
                          int64_t V, int64_t Vp, cudaStream_t stream);

void softmax_xent_forward_backward(float* losses, float* dlogits, const float* logits,
                                   const int32_t* targets, float dloss, int64_t N, int64_t V,
                                   int64_t Vp, cudaStream_t stream);

}  // namespace etr::cuda
