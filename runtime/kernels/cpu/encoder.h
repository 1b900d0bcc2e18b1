// encoder: GPT-2's input embedding, token embedding plus learned position embedding.
//
//   tokens   [B, T]     int32 token ids, each in [0, V) (else InvalidArgument, before any
//                       thread starts)
//   wte      [Vp, C]    token embeddings; rows [V, Vp) (vocabulary padding) never read.
//                       Tied to the LM head: the same buffer is matmul's weight there.
//   wpe      [maxT, C]  position embeddings, maxT >= T; rows [0, T) used
//   out      [B, T, C]  assigned: out[b, t] = wte[tokens[b, t]] + wpe[t]
//
// backward, given dout [B, T, C]:
//   dwte     [Vp, C]    += dout[b, t] in row tokens[b, t], for every (b, t)
//   dwpe     [maxT, C]  += sum over b of dout[b, t] in row t
//
// Forward: positions split over the threads. Backward: COLUMNS split over the threads;
// each walks every position in order and owns its columns of both tables, so repeated
// tokens need no atomics and the sums do not depend on the thread count.
#pragma once

#include <cstdint>

namespace etr::cpu {

template <typename Real>
void encoder_forward(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe,
                     int64_t B, int64_t T, int64_t C, int64_t V);

template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens, int64_t B,
                      int64_t T, int64_t C, int64_t V);

}  // namespace etr::cpu
