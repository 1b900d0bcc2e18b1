// Element-wise CUDA kernels with host-callable launchers. Each launcher enqueues on
// `stream` and returns at once; an empty range (n == 0) enqueues nothing.
//
//   cuda_cast:  out[i] = convert(in[i]) for i in [0, n); in [n] of in_t, out [n] of out_t.
//               Pairs: f32 <-> bf16, f32 <-> f16, f32 <-> f64 (rounding to nearest even,
//               as runtime/dtype.h does on the CPU), and any dtype to itself (a copy).
//               `in` and `out` must not overlap unless they are the same buffer of one
//               dtype.
//   cuda_scale: data[i] *= factor for i in [0, n), in place; f32, f64, bf16, f16. The
//               16-bit types are widened to f32, multiplied by float(factor) and rounded
//               back once; f32 multiplies by float(factor), f64 by factor.
// Both throw InvalidArgument for pairs/dtypes they do not handle and etr::Error when the
// launch fails. Every kernel is checked against the CPU reference in tests/gpu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/dtype.h"

namespace etr {

void cuda_cast(const void* in, DType in_t, void* out, DType out_t, int64_t n, cudaStream_t stream);

void cuda_scale(void* data, DType t, int64_t n, double factor, cudaStream_t stream);

}  // namespace etr
