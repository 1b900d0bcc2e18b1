// gelu forward/backward on the GPU (gelu.h): inp [n], out [n]; dout [n], dinp [n].
//
// Grid-stride loops with 64-bit indices: at most kGridStrideBlocks x kGridStrideThreads
// (grid_stride.cuh) threads cover any n. The formulas are the CPU kernel's, term for term.
#include <algorithm>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/gelu.h"
#include "runtime/kernels/cuda/grid_stride.cuh"

namespace etr::cuda {
namespace {

constexpr int kThreads = detail::kGridStrideThreads;

constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
constexpr float kCubic = 0.044715f;

// No __restrict__: out may be inp (each element is read once, then written).
__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
  }
}

__global__ void gelu_backward_kernel(float* __restrict__ dinp, const float* __restrict__ inp,
                                     const float* __restrict__ dout, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const float t = tanhf(u);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    const float grad = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
    dinp[i] += grad * dout[i];
  }
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  detail::check_count(n, "gelu_forward");
  if (n == 0) return;
  gelu_forward_kernel<<<detail::grid_stride_blocks(n), kThreads, 0, stream>>>(out, inp, n);
  CUDA_CHECK(cudaGetLastError());
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                   cudaStream_t stream) {
  detail::check_count(n, "gelu_backward");
  if (n == 0) return;
  gelu_backward_kernel<<<detail::grid_stride_blocks(n), kThreads, 0, stream>>>(dinp, inp, dout, n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace etr::cuda
