// Flash attention of the CUDA bf16 set (FlashAttention-2 style): GPT-2's causal multi-head
// self-attention without the T x T matrix. The contract of attention_bf16.h for qkv, out,
// dout and dqkv; `att` and the scratch hold row statistics instead of probabilities.
// NH heads of size hs = C / NH, hs 64 or 128 only; scale 1 / sqrt(hs).
//
//   qkv      [B, T, 3C]    bf16: q, k, v in columns [0, C), [C, 2C), [2C, 3C); head h owns
//                          columns [h hs, (h + 1) hs) of each
//   out      [B, T, C]     bf16, assigned: softmax(scale q k^T, causal) v
//   att      [flash_attention_saved_numel] bf16 elements, read as float lse [B, NH, T]:
//                          the log-sum-exp of row t's scaled scores over s <= t (natural
//                          log), assigned; the rest of the buffer (rounding to 8) untouched
// backward, given dout [B, T, C] (bf16), the forward's qkv, att (lse) and out:
//   dqkv     [B, T, 3C]    bf16 += gradient of q, k and v
//   scratch  [flash_attention_backward_scratch_size] bf16 elements, read as float
//                          Dsum [B, NH, T] = rowsum(dout * out) per head, temporary
//
// Tiling: 64 query rows x 64 key rows a tile, 4 warps a block, each warp owning 16 rows of
// every tile. Forward: one block per (query tile, head, sequence); it walks the key tiles
// up to the diagonal with an online softmax (running max m and sum l per row, fp32) and
// keeps the output accumulator O [64, hs] fp32 in shared memory. Backward: dsum kernel
// (a warp per row); a dK/dV kernel, one block per key tile, walking the query tiles at or
// after it; a dQ kernel, one block per query tile, walking the key tiles up to it. Both
// recompute P = exp(scale S - lse). Tails (T not a multiple of 64) load as zero rows and
// are masked out of P; rows at or past T are never written.
//
// Products: nvcuda::wmma 16x16x16 fragments, bf16 inputs, fp32 accumulation (S = Q K^T,
// O += P V; backward S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q, S = Q K^T,
// dP = dO V^T, dQ += dS K).
//
// Precision: scores, softmax statistics, exponentials, Dsum and every accumulator are
// fp32. bf16 rounding happens (1) to P before it enters a product (O += P V, dV += P^T dO),
// and to dS = P (dP - Dsum) (computed in fp32 from the bf16 P) before dK += dS^T Q and
// dQ += dS K; (2) once per output element: out = bf16(O / l), and dqkv = bf16(dqkv + g)
// with g the fp32 gradient (dK and dQ scaled in fp32 first). The CPU reference rounds only
// at the end; the rounded P and dS put a relative error of about 2^-9 into single terms.
//
// Determinism: no atomics. Each output element is written by one thread once, and every
// sum has a fixed order (the fragments' k loops, the tiles in order, fixed warp
// butterflies), so two runs on one GPU model give the same bits.
//
// Memory: the forward saves 4 B NH T bytes (lse) instead of 2 B NH T^2 (GPT-2 124M, T
// 1024: 48 KiB instead of 24 MiB a sequence a layer); the backward's scratch is another
// 4 B NH T bytes instead of NH T^2 bf16. Shared memory a block: about 71 KiB (hs 64) or
// 110 KiB (hs 128) in the forward, 62 / 95 KiB in the backward kernels.
//
// Device pointers; enqueued on `stream`, returns at once; B == 0 or T == 0 enqueues
// nothing. qkv, out, dout and dqkv must be 16-byte aligned and att and scratch 4-byte
// aligned (the allocator's buffers are); otherwise, and for a head size other than 64 or
// 128, B or NH above 65535, or too little scratch, etr::InvalidArgument.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/dtype.h"

namespace etr::cuda {

// True when the bf16 set runs the flash attention for heads of C / NH: hs is 64 or 128
// and the environment variable ETR_FLASH_ATTENTION (read once per process) is not "0".
// Otherwise the set uses attention_bf16.h and the sizes below do not apply.
bool flash_attention_enabled(int64_t C, int64_t NH);

// bf16 elements of `att`: 2 B NH T (the fp32 lse) rounded up to a multiple of 8.
int64_t flash_attention_saved_numel(int64_t B, int64_t T, int64_t C, int64_t NH);

// bf16 elements of scratch for the backward: 2 B NH T (the fp32 Dsum), rounded up to 8.
int64_t flash_attention_backward_scratch_size(int64_t B, int64_t T, int64_t C, int64_t NH);

void flash_attention_forward(bf16* out, bf16* att, const bf16* qkv, int64_t B, int64_t T, int64_t C,
                             int64_t NH, cudaStream_t stream);

void flash_attention_backward(bf16* dqkv, bf16* scratch, int64_t scratch_size, const bf16* dout,
                              const bf16* qkv, const bf16* att, const bf16* out, int64_t B,
                              int64_t T, int64_t C, int64_t NH, cudaStream_t stream);

}  // namespace etr::cuda
