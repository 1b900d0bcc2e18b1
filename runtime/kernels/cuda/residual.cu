// residual forward/backward on the GPU (residual.h): inp1 [n], inp2 [n], out [n];
// dout [n], dinp1 [n], dinp2 [n].
//
// Grid-stride loops with 64-bit indices: at most kGridStrideBlocks x kGridStrideThreads
// (grid_stride.cuh) threads cover any n. When dinp1 == dinp2 a separate kernel adds 2 dout once:
// the two-buffer kernel would also be right there (one thread does both read-modify-writes of an
// element, in order), but its __restrict__ promise would be false.
#include <algorithm>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/grid_stride.cuh"
#include "runtime/kernels/cuda/residual.h"

namespace etr::cuda {
namespace {

constexpr int kThreads = detail::kGridStrideThreads;

// No __restrict__: out may be inp1 or inp2 (same index read, then written).
__global__ void residual_forward_kernel(float* out, const float* inp1, const float* inp2,
                                        int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = inp1[i] + inp2[i];
  }
}

__global__ void residual_backward_kernel(float* __restrict__ dinp1, float* __restrict__ dinp2,
                                         const float* __restrict__ dout, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float d = dout[i];
    dinp1[i] += d;
    dinp2[i] += d;
  }
}

// dinp1 == dinp2: the one buffer receives 2 dout.
__global__ void residual_backward_same_kernel(float* __restrict__ dinp,
                                              const float* __restrict__ dout, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dinp[i] += 2.0f * dout[i];
  }
}

}  // namespace

void residual_forward(float* out, const float* inp1, const float* inp2, int64_t n,
                      cudaStream_t stream) {
  detail::check_count(n, "residual_forward");
  if (n == 0) return;
  residual_forward_kernel<<<detail::grid_stride_blocks(n), kThreads, 0, stream>>>(out, inp1, inp2,
                                                                                  n);
  CUDA_CHECK(cudaGetLastError());
}

void residual_backward(float* dinp1, float* dinp2, const float* dout, int64_t n,
                       cudaStream_t stream) {
  detail::check_count(n, "residual_backward");
  if (n == 0) return;
  if (dinp1 == dinp2) {
    residual_backward_same_kernel<<<detail::grid_stride_blocks(n), kThreads, 0, stream>>>(dinp1,
                                                                                          dout, n);
  } else {
    residual_backward_kernel<<<detail::grid_stride_blocks(n), kThreads, 0, stream>>>(dinp1, dinp2,
                                                                                     dout, n);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace etr::cuda
