// attention: GPT-2's causal multi-head self-attention, after the QKV product and before
// the output projection. NH heads of size hs = C / NH; scale 1 / sqrt(hs).
//
//   qkv      [B, T, 3C]    per position: q in columns [0, C), k in [C, 2C), v in [2C, 3C);
//                          head h owns columns [h hs, (h+1) hs) of each (GPT-2's c_attn)
//   att      [B, NH, T, T] assigned, saved for backward: att[b, h, t, s] = softmax over
//                          s <= t of q_t . k_s * scale, and exactly 0 for s > t
//   out      [B, T, C]     assigned; head h writes columns [h hs, (h+1) hs)
//
// backward, given dout [B, T, C] and the forward's qkv and att:
//   dqkv     [B, T, 3C]    += gradient of q, k and v
//   scratch  [attention_backward_scratch_size(T, threads)]  temporary, contents ignored
//
// Memory: att is B * NH * T^2 elements, O(T^2) per head like llm.c's CPU attention and
// PyTorch's eager attention: fine for T <= 1024 (GPT-2 124M, B 8, T 1024: 8 * 12 * 1024^2
// * 4 bytes = 403 MB per layer, 4.8 GB for 12 layers). Only the causal half is non-zero;
// storing just the log-sum-exp per row (B * NH * T) and recomputing att in backward
// (flash-attention style) would trade it for one more product in backward (7 instead of
// 6 per head). The backward's scratch is one block of kAttentionRows x T per thread, not
// B * NH * T^2.
//
// Computation, per (b, h) pair (the pairs split over the threads), by blocks of
// kAttentionRows query rows [r0, r1), each against keys [0, r1) only (the causal mask
// skips the products above the block's diagonal):
//   forward   S = scale Q K^T (OpenBLAS), row softmax over s <= t in place, out = att V
//   backward  dP = dO V^T, dV += att^T dO, dS = att * (dP - rowsum(att * dP)),
//             dQ += scale dS K, dK += scale dS^T Q
// The blocks of one pair run in order on one thread, so the sums into dK and dV do not
// depend on the thread count; with fewer pairs than threads (B * NH < threads) the rest
// of the threads idle.
#pragma once

#include <cstdint>

namespace etr::cpu {

// Query rows per block. bench/kernels_bench.cc at B 8, T 128, C 256, NH 4, 1 thread,
// forward / backward: 32 rows 2.05 / 3.78 ms, 64 rows 1.69 / 3.42 ms, 128 rows (no
// blocking: the whole T x T product) 3.48 / 4.54 ms.
inline constexpr int64_t kAttentionRows = 64;

// Elements of scratch attention_backward needs to run on `threads` threads (it runs on
// fewer when given less, on one at least).
int64_t attention_backward_scratch_size(int64_t T, int threads);

template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH);

template <typename Real>
void attention_backward(Real* dqkv, Real* scratch, int64_t scratch_size, const Real* dout,
                        const Real* qkv, const Real* att, int64_t B, int64_t T, int64_t C,
                        int64_t NH);

}  // namespace etr::cpu
