// gelu on the GPU: GPT-2's GELU, tanh approximation, element-wise (the contract of
// runtime/kernels/cpu/gelu.h, float only, device pointers):
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//
//   inp      [n]        any shape, n elements (B * T * 4C in the MLP)
//   out      [n]        assigned; may be the same buffer as inp (in place), no other overlap
//
// backward, given dout [n] and the forward's input:
//   dinp     [n]        += dout * gelu'(inp); must not overlap dout or inp
//
// Enqueued on `stream`; returns at once. Differences from the CPU version: tanh is CUDA's
// tanhf (within 2 ulp; the CPU's vec_math.h tanh is within a few ulp), so results agree to
// a few ulp, not bit for bit. A negative n throws etr::InvalidArgument.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace etr::cuda {

void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                   cudaStream_t stream);

}  // namespace etr::cuda
