// matmul on the GPU: a linear layer, out = inp . weight^T + bias, through cuBLAS sgemm
// (the contract of runtime/kernels/cpu/matmul.h, float only, device pointers).
//
//   inp      [N, C]     N = B * T positions
//   weight   [OC, C]    row o holds the C input weights of output o (PyTorch's Linear)
//   bias     [OC]       nullptr: no bias
//   out      [N, OC]    assigned; must not overlap inp, weight or bias
//
// backward, given dout [N, OC]:
//   dinp     [N, C]     += dout . weight              nullptr: not needed
//   dweight  [OC, C]    += dout^T . inp               nullptr: not needed
//   dbias    [OC]       += column sums of dout        nullptr: no bias
//
// Everything is enqueued on `stream` and the calls return at once (no host
// synchronisation, no allocation). The three gradients are independent launches: any may
// be left out (nullptr) and the others are bitwise what one call computing all three gives.
//
// Differences from the CPU version:
// - The products follow the math mode of runtime/kernels/cuda/cublas.h: TF32 tensor cores
//   by default (about 1e-3 relative error), true f32 (pedantic) when set, as the tests do.
// - Summation orders are cuBLAS's (bitwise the same from run to run on one GPU model and
//   cuBLAS version, not across them), and dbias sums each column in 32 interleaved
//   partial sums (rows r, r + 32, ...) added in a fixed order, not row after row.
// - N, C and OC must each fit cuBLAS's 32-bit int (checked); negative sizes throw
//   etr::InvalidArgument, as on the CPU. Buffers are trusted to have the stated shapes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace etr::cuda {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int64_t C, int64_t OC, cudaStream_t stream);

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t C, int64_t OC, cudaStream_t stream);

}  // namespace etr::cuda
