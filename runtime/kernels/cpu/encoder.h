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
// Forward: positions split over the threads. Backward: each thread owns a range of ROWS
// of dwte (vocabulary entries) and of dwpe (positions) and walks every position in order,
// adding only into its own rows: repeated tokens need no atomics, no cache line is
// written by two threads (a split by columns was measured 6x slower on 2 threads: rows
// of C = 256 floats put one shared line in every row), and every row's sum is in
// position order, the same for any thread count. Balance follows the token histogram.
#pragma once

#include <cstdint>

namespace etr::cpu {

template <typename Real>
void encoder_forward(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe, int64_t B,
                     int64_t T, int64_t C, int64_t V);

template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens, int64_t B,
                      int64_t T, int64_t C, int64_t V);

// Rows [r0, r1) of encoder_backward's dwte or dwpe (the other nullptr): the same sums, in
// the same position order, restricted to those rows (bitwise those rows of
// encoder_backward). ZeRO's blocked gradients (runtime/grad_sink.h) take the embedding a
// block of rows at a time.
template <typename Real>
void encoder_backward_rows(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens,
                           int64_t B, int64_t T, int64_t C, int64_t V, int64_t r0, int64_t r1);

}  // namespace etr::cpu
