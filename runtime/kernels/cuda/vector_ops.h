// Element-wise vector kernels of the CUDA set, the float instantiations of
// runtime/kernels/cpu/elementwise.h: zeroing a gradient, copying one, adding one into
// another, summing losses. Device pointers; each call enqueues on `stream` and returns at
// once (no host synchronisation).
//
//   fill(out[n], value)          out = value
//   copy(out[n], inp[n])         out = inp   (out == inp is allowed and does nothing; no
//                                other overlap)
//   add_inplace(out[n], inp[n])  out += inp  (out == inp doubles out; no other overlap)
//   sum(out[1], inp[n])          *out = sum of inp in double, written to a device scalar
//   accumulate_mean(acc[1], inp[n], divisor, num, den)
//                                *acc += sum(inp) / divisor * num / den (a micro-batch's share
//                                of the step's loss, added on the device: no host read)
//
// Differences from the CPU versions:
// - sum writes its result into the device scalar `out` (double) instead of returning it:
//   the caller reads it once per step. The order of the additions is fixed by n alone
//   (deterministic_sum.cuh: one cluster of 8 blocks of 1024 threads, a fixed tree), so the
//   result is bitwise the same run to run and on any device running this build, but it is
//   not the CPU's sequential order. Thread-block clusters need compute capability 9.0+
//   (the build's sm_90 target). Its error is at most the longest chain of additions, about
//   (n / 8192 + 15) x 1.1e-16 x sum |inp|, and in practice far less (~1e-15 relative).
// - sum with n == 0 writes 0.0 (an empty sum, as the CPU returns); it is the only call
//   here that enqueues work for n == 0. The others enqueue nothing for n == 0.
// - A negative n throws etr::InvalidArgument (the CPU does nothing for n <= 0).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace etr::cuda {

void fill(float* out, float value, int64_t n, cudaStream_t stream);

void copy(float* out, const float* inp, int64_t n, cudaStream_t stream);

void add_inplace(float* out, const float* inp, int64_t n, cudaStream_t stream);

void sum(double* out, const float* inp, int64_t n, cudaStream_t stream);

// The sum in sum()'s order; n == 0 adds nothing.
void accumulate_mean(double* acc, const float* inp, int64_t n, double divisor, double num,
                     double den, cudaStream_t stream);

}  // namespace etr::cuda
