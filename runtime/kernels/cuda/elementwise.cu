// Element-wise kernels: dtype casts and in-place scaling (contract in elementwise.h).
//
// Every kernel is a grid-stride loop over [0, n) with 64-bit indices: a launch of at
// most kGridStrideBlocks x kGridStrideThreads (grid_stride.cuh) threads covers any n, each thread
// stepping by the grid size. Conversions use the CUDA intrinsics that round to nearest even
// (__float2bfloat16,
// __float2half, the f64 -> f32 cast), matching runtime/dtype.h bit for bit on finite
// values.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/elementwise.h"
#include "runtime/kernels/cuda/grid_stride.cuh"

namespace etr {

namespace {

constexpr int kThreads = cuda::detail::kGridStrideThreads;

// Scalar conversions, one per supported (Out, In) pair.
template <typename Out, typename In>
struct Convert;
template <>
struct Convert<__nv_bfloat16, float> {
  __device__ static __nv_bfloat16 apply(float x) { return __float2bfloat16(x); }
};
template <>
struct Convert<float, __nv_bfloat16> {
  __device__ static float apply(__nv_bfloat16 x) { return __bfloat162float(x); }
};
template <>
struct Convert<__half, float> {
  __device__ static __half apply(float x) { return __float2half(x); }
};
template <>
struct Convert<float, __half> {
  __device__ static float apply(__half x) { return __half2float(x); }
};
template <>
struct Convert<double, float> {
  __device__ static double apply(float x) { return static_cast<double>(x); }
};
template <>
struct Convert<float, double> {
  __device__ static float apply(double x) { return static_cast<float>(x); }
};

template <typename Out, typename In>
__global__ void cast_kernel(const In* __restrict__ in, Out* __restrict__ out, int64_t n) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = Convert<Out, In>::apply(in[i]);
  }
}

template <typename Out, typename In>
void launch_cast(const void* in, void* out, int64_t n, cudaStream_t stream) {
  cast_kernel<Out, In><<<cuda::detail::grid_stride_blocks(n), kThreads, 0, stream>>>(
      static_cast<const In*>(in), static_cast<Out*>(out), n);
  CUDA_CHECK(cudaGetLastError());
}

// data * factor with one rounding, per dtype (see elementwise.h).
__device__ inline float scaled(float x, double factor) {
  return x * static_cast<float>(factor);
}
__device__ inline double scaled(double x, double factor) {
  return x * factor;
}
__device__ inline __nv_bfloat16 scaled(__nv_bfloat16 x, double factor) {
  return __float2bfloat16(__bfloat162float(x) * static_cast<float>(factor));
}
__device__ inline __half scaled(__half x, double factor) {
  return __float2half(__half2float(x) * static_cast<float>(factor));
}

template <typename T>
__global__ void scale_kernel(T* data, int64_t n, double factor) {
  int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    data[i] = scaled(data[i], factor);
  }
}

template <typename T>
void launch_scale(void* data, int64_t n, double factor, cudaStream_t stream) {
  scale_kernel<T><<<cuda::detail::grid_stride_blocks(n), kThreads, 0, stream>>>(
      static_cast<T*>(data), n, factor);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void cuda_cast(const void* in, DType in_t, void* out, DType out_t, int64_t n, cudaStream_t stream) {
  cuda::detail::check_count(n, "cuda_cast");
  if (n == 0) return;
  if (in_t == out_t) {
    if (in != out) {
      CUDA_CHECK(cudaMemcpyAsync(out, in, static_cast<size_t>(n) * dtype_size(in_t),
                                 cudaMemcpyDefault, stream));
    }
    return;
  }
  using BF16 = __nv_bfloat16;
  if (in_t == DType::kF32 && out_t == DType::kBF16)
    return launch_cast<BF16, float>(in, out, n, stream);
  if (in_t == DType::kBF16 && out_t == DType::kF32)
    return launch_cast<float, BF16>(in, out, n, stream);
  if (in_t == DType::kF32 && out_t == DType::kF16)
    return launch_cast<__half, float>(in, out, n, stream);
  if (in_t == DType::kF16 && out_t == DType::kF32)
    return launch_cast<float, __half>(in, out, n, stream);
  if (in_t == DType::kF32 && out_t == DType::kF64)
    return launch_cast<double, float>(in, out, n, stream);
  if (in_t == DType::kF64 && out_t == DType::kF32)
    return launch_cast<float, double>(in, out, n, stream);
  throw InvalidArgument("cuda_cast cannot convert " + std::string(dtype_name(in_t)) + " to " +
                        std::string(dtype_name(out_t)) +
                        "; it converts f32 to and from bf16, f16 and f64 (cast through f32 "
                        "for other pairs)");
}

void cuda_scale(void* data, DType t, int64_t n, double factor, cudaStream_t stream) {
  cuda::detail::check_count(n, "cuda_scale");
  if (n == 0) return;
  switch (t) {
    case DType::kF32:
      return launch_scale<float>(data, n, factor, stream);
    case DType::kF64:
      return launch_scale<double>(data, n, factor, stream);
    case DType::kBF16:
      return launch_scale<__nv_bfloat16>(data, n, factor, stream);
    case DType::kF16:
      return launch_scale<__half>(data, n, factor, stream);
    case DType::kI32:
      break;
  }
  throw InvalidArgument("cuda_scale works on f32, f64, bf16 and f16, not " +
                        std::string(dtype_name(t)) + "; cast to a floating type first");
}

}  // namespace etr
