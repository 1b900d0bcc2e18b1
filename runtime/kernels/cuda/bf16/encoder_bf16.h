// encoder of the CUDA bf16 set: token plus position embedding, bf16 activations and
// parameters, fp32 parameter gradients; the contract of runtime/kernels/cpu/encoder.h
// (fp32 twin and its notes on trusted token ids: runtime/kernels/cuda/encoder.h).
//
//   tokens   [B, T]     int32 token ids in [0, V) (device memory, trusted)
//   wte      [Vp, C]    bf16; rows [V, Vp) never read or written
//   wpe      [maxT, C]  bf16, rows [0, T) used
//   out      [B, T, C]  bf16, assigned: bf16(wte[tokens[b, t]] + wpe[t]) (fp32 add, one
//                       rounding); an id outside [0, V) gives NaN in its position's row
//
// backward, given dout [B, T, C] (bf16):
//   dwte     [Vp, C]    fp32 += dout[b, t] in row tokens[b, t]; ids outside [0, V) skipped
//   dwpe     [maxT, C]  fp32 += sum over b of dout[b, t] in row t
//
// Forward: 16-byte loads and stores when C % 8 == 0 and the buffers are 16-byte aligned,
// scalar otherwise. Backward: the fp32 set's deterministic scheme on bf16 dout (no
// atomics): each dwte (row, channel) is owned by one warp lane, which adds its positions'
// dout in position order onto the old value, and each dwpe element adds its B rows in b
// order; so the fp32 gradients are the CPU reference's bits (its float kernel on the
// widened dout adds in the same order). Device pointers; enqueued on `stream`, returns at
// once; an empty batch enqueues nothing; B, T, C < 0 or V < 1 throw etr::InvalidArgument.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/dtype.h"

namespace etr::cuda {

void encoder_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int64_t B,
                     int64_t T, int64_t C, int64_t V, cudaStream_t stream);

void encoder_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int64_t B,
                      int64_t T, int64_t C, int64_t V, cudaStream_t stream);

}  // namespace etr::cuda
