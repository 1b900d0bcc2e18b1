// softmax_xent: softmax over the vocabulary fused with the cross-entropy loss (the GPT's
// last step), with llm.c's padded vocabulary and an ignore index.
//
//   logits   [N, Vp]    row n: V real logits, then Vp - V padding columns (Vp >= V, e.g. V
//                       rounded up to a multiple of 64 for the LM head's product); the
//                       padding is never read, whatever it holds
//   targets  [N]        int32: the next token, in [0, V); a negative target marks a position
//                       that is ignored (loss 0, zero gradient): padding, a prompt. >= V
//                       throws InvalidArgument before any thread starts.
//   losses   [N]        assigned: log(sum_v exp(logits[n, v])) - logits[n, targets[n]]
//
// softmax_xent_forward_backward also computes, in the same pass over each row,
//   dlogits  [N, Vp]    ASSIGNED (the one gradient kernels.h lets be assigned):
//                       (softmax(logits[n, :V]) - onehot(targets[n])) * dloss for the real
//                       columns, 0 for the padding, 0 for an ignored row. May be the same
//                       buffer as logits (in place: the logits are not needed after
//                       the loss, and for GPT-2, V = 50257, [N, Vp] is the largest
//                       activation). No other overlap.
//   dloss               the gradient of the training loss with respect to each position's
//                       loss, e.g. 1 / (number of non-ignored tokens in the global batch)
//                       for a mean.
//
// Stable for any finite logits (the row maximum is subtracted before exp; tested with
// +-100). The sums are in Real. Rows split over the threads.
#pragma once

#include <cstdint>

namespace etr::cpu {

template <typename Real>
void softmax_xent_forward(Real* losses, const Real* logits, const int32_t* targets, int64_t N,
                          int64_t V, int64_t Vp);

template <typename Real>
void softmax_xent_forward_backward(Real* losses, Real* dlogits, const Real* logits,
                                   const int32_t* targets, Real dloss, int64_t N, int64_t V,
                                   int64_t Vp);

}  // namespace etr::cpu
