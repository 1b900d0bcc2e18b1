// encoder on the GPU: GPT-2's input embedding, token embedding plus learned position
// embedding; the CUDA twin of runtime/kernels/cpu/encoder.h.
//
//   tokens   [B, T]     int32 token ids, each in [0, V) (trusted: see below)
//   wte      [Vp, C]    token embeddings; rows [V, Vp) (vocabulary padding) never read or
//                       written. Tied to the LM head: the same buffer is matmul's weight there.
//   wpe      [maxT, C]  position embeddings, maxT >= T; rows [0, T) used
//   out      [B, T, C]  assigned: out[b, t] = wte[tokens[b, t]] + wpe[t]
//
// backward, given dout [B, T, C]:
//   dwte     [Vp, C]    += dout[b, t] in row tokens[b, t], for every (b, t)
//   dwpe     [maxT, C]  += sum over b of dout[b, t] in row t
//
// All pointers are device pointers (tokens too); every function enqueues on `stream` and
// returns at once (no host synchronisation, no allocation). An empty batch (B, T or C 0)
// enqueues nothing. Bad sizes (B, T or C negative, V < 1) throw etr::InvalidArgument before
// anything is enqueued.
//
// Differences from the CPU version:
// - Token ids are NOT checked: they live on the device, and reading them on the host would
//   synchronise. The kernels trust them; as a guard, a position whose id is outside [0, V)
//   gets NaN in every channel of `out` (not an out-of-bounds read), and the backward skips
//   it. The CPU version throws InvalidArgument instead.
// - Summation order: none differs. Every dwte row adds its positions' dout rows one at a
//   time in position order, and every dwpe row its batch rows in b order, onto the old
//   value, as the CPU does, so the results are the CPU's bits (and the same on every run).
//
// Cost of the deterministic backward: dwte is a scatter-add with repeated tokens, done
// without atomics (protocol in encoder.cu). Each warp owns 32 channels of one interleaved
// bucket of vocabulary rows (ids v with v % buckets == bucket, buckets ~ 4096 / ceil(C / 32),
// at most V), scans all B * T ids 32 at a time and adds its matching dout rows in order.
// So ~4096 warps each read the 4 B * T byte id array (it stays in L2), and a warp's time
// grows with its bucket's share of the batch: a token that fills most of a batch
// serialises its ceil(C / 32) warps over its positions (a run of equal ids is summed in a
// register, so the degenerate all-equal batch costs one add per position per lane).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace etr::cuda {

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                     int64_t B, int64_t T, int64_t C, int64_t V, cudaStream_t stream);

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                      int64_t T, int64_t C, int64_t V, cudaStream_t stream);

}  // namespace etr::cuda
