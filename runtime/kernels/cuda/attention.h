// attention on the GPU: GPT-2's causal multi-head self-attention, after the QKV product
// and before the output projection; the CUDA twin of runtime/kernels/cpu/attention.h.
// NH heads of size hs = C / NH; scale 1 / sqrt(hs).
//
//   qkv      [B, T, 3C]    per position: q in columns [0, C), k in [C, 2C), v in [2C, 3C);
//                          head h owns columns [h hs, (h+1) hs) of each
//   att      [B, NH, T, T] assigned, saved for backward: att[b, h, t, s] = softmax over
//                          s <= t of q_t . k_s * scale, and exactly 0 for s > t
//   out      [B, T, C]     assigned; head h writes columns [h hs, (h+1) hs)
//
// backward, given dout [B, T, C] and the forward's qkv and att:
//   dqkv     [B, T, 3C]    += gradient of q, k and v
//   scratch  [attention_backward_scratch_size(B, T, C, NH)] = [NH, T, T]  temporary,
//            contents ignored (dP, then dS in place, of one sequence at a time)
//
// All pointers are device pointers; both functions enqueue on `stream` and return at once
// (no host synchronisation, no allocation). B == 0 or T == 0 enqueues nothing.
//
// Computation, per sequence b (a loop on the host), with the NH heads of b as one
// cuBLAS strided-batched product: q, k, v, dq, dk, dv and dout are addressed in place
// (leading dimension 3C or C, head stride hs), so nothing is permuted and the gradients
// are added straight into dqkv (beta = 1). The heads of different sequences cannot share
// one batch stride (b steps T 3C, h steps hs), hence the loop over b: 2 B products in
// forward and 4 B in backward, plus one softmax launch in forward and B in backward.
//   forward   S = scale Q K^T over the whole T x T block (cuBLAS), then a row softmax
//             over s <= t (one warp per row, row max subtracted) that writes exact zeros
//             above the diagonal; out = att V (the zeros add nothing)
//   backward  dP = dO V^T, dV += att^T dO, dS = att * (dP - rowsum(att * dP)) (exact
//             zeros above the diagonal), dQ += scale dS K, dK += scale dS^T Q
//
// Differences from the CPU version:
// - attention_backward_scratch_size takes (B, T, C, NH) and asks for NH T^2 elements
//   (one sequence's dP for all heads), not the CPU's threads x 64 x T; the backward
//   throws etr::InvalidArgument when given less (the CPU runs on fewer threads instead).
// - The forward keeps the CPU's arguments (plus the stream) and needs no scratch: the
//   products address qkv in place, so nothing is permuted into temporaries.
// - The products cover the full T x T block instead of skipping the causal upper half, so
//   they do about twice the CPU's multiply-adds; the sums run in cuBLAS's order and the
//   row reductions in a warp's order (each lane strides over s, then a butterfly), so
//   results differ from the CPU's in the last bits (well within relative L2 1e-5 in
//   pedantic FP32; under the default TF32 math mode, cublas.h, the products round their
//   inputs to TF32).
//   Every sum has a fixed order: two runs give the same bits.
// - Bad sizes (B or T < 0, C or NH <= 0, C not divisible by NH, 3C, T or NH beyond
//   cuBLAS's int) throw etr::InvalidArgument; the CPU throws etr::Error for the first two.
//   Device buffers are trusted to have the stated shapes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace etr::cuda {

// Elements of scratch attention_backward needs: NH * T * T (0 when B or T is 0). Throws
// InvalidArgument for sizes the kernels reject.
int64_t attention_backward_scratch_size(int64_t B, int64_t T, int64_t C, int64_t NH);

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, cudaStream_t stream);

void attention_backward(float* dqkv, float* scratch, int64_t scratch_size, const float* dout,
                        const float* qkv, const float* att, int64_t B, int64_t T, int64_t C,
                        int64_t NH, cudaStream_t stream);

}  // namespace etr::cuda
