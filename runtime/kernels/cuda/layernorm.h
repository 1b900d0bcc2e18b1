// layernorm on the GPU: y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias over the last
// axis, the CUDA twin of runtime/kernels/cpu/layernorm.h (biased variance, f32 statistics).
//
//   inp      [N, C]     N = B * T positions
//   weight   [C]
//   bias     [C]
//   out      [N, C]     assigned; must not overlap the others
//   mean     [N]        assigned: the mean of each row          } saved for backward;
//   rstd     [N]        assigned: 1 / sqrt(var + eps) of each row } both nullptr: not saved
//
// backward, given dout [N, C] and the saved mean and rstd:
//   dinp     [N, C]     += input gradient
//   dweight  [C]        += sum over rows of dout * xhat,  xhat = (x - mean) * rstd
//   dbias    [C]        += sum over rows of dout
//
// All pointers are device pointers; every function enqueues on `stream` and returns at once
// (no host synchronisation, no allocation). N == 0 enqueues nothing. Bad sizes (N < 0, C < 1,
// eps <= 0) throw etr::InvalidArgument before anything is enqueued.
//
// Differences from the CPU version:
// - eps comes before the stream and has no default; the overload without eps uses
//   etr::cpu::kLayerNormEps, as the CPU default does.
// - Summation order: a row's sums are 32 lane-strided partial sums combined by a warp
//   butterfly (the CPU sums a row with an OpenMP simd reduction); dweight and dbias sum each
//   column's rows in 32 row-strided f64 partials, then the 32 partials in order, and add the
//   total, rounded to f32, once (the CPU adds the f32 rows one by one). The order is fixed
//   by the sizes alone, so two runs give the same bits, but not the CPU's bits: agreement
//   to ~1e-7 relative, and at large N dweight and dbias are closer to the exact sums than
//   the CPU's f32 ones (at N 600001 those are 1e-5 off).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/kernels/cpu/layernorm.h"

namespace etr::cuda {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, double eps, cudaStream_t stream);

// The same with eps = etr::cpu::kLayerNormEps (GPT-2's 1e-5).
inline void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int64_t N, int64_t C,
                              cudaStream_t stream) {
  layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, cpu::kLayerNormEps, stream);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C, cudaStream_t stream);

}  // namespace etr::cuda
