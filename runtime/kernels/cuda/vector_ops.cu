// Element-wise vector kernels (contract in vector_ops.h).
//
// fill and add_inplace are grid-stride loops with 64-bit indices: at most
// kGridStrideBlocks x kGridStrideThreads (grid_stride.cuh) threads cover any n, each stepping by
// the grid size. copy is a device-to-device cudaMemcpyAsync. sum is the deterministic cluster
// reduction of deterministic_sum.cuh.
#include <algorithm>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/deterministic_sum.cuh"
#include "runtime/kernels/cuda/grid_stride.cuh"
#include "runtime/kernels/cuda/vector_ops.h"

namespace etr::cuda {
namespace {

constexpr int kThreads = detail::kGridStrideThreads;

__global__ void fill_kernel(float* __restrict__ out, float value, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = value;
  }
}

// No __restrict__: out == inp is allowed (each element is read, then written, by one thread).
__global__ void add_inplace_kernel(float* out, const float* inp, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] += inp[i];
  }
}

struct Identity {
  __device__ double operator()(float x) const { return static_cast<double>(x); }
};

// *out += total / divisor * num / den (accumulate_mean's epilogue).
struct AddMean {
  double divisor, num, den;
  __device__ void operator()(double* out, double total) const {
    *out += total / divisor * num / den;
  }
};

}  // namespace

void fill(float* out, float value, int64_t n, cudaStream_t stream) {
  detail::check_count(n, "cuda::fill");
  if (n == 0) return;
  fill_kernel<<<detail::grid_stride_blocks(n), kThreads, 0, stream>>>(out, value, n);
  CUDA_CHECK(cudaGetLastError());
}

void copy(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  detail::check_count(n, "cuda::copy");
  if (n == 0 || out == inp) return;
  CUDA_CHECK(cudaMemcpyAsync(out, inp, static_cast<size_t>(n) * sizeof(float),
                             cudaMemcpyDeviceToDevice, stream));
}

void add_inplace(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  detail::check_count(n, "cuda::add_inplace");
  if (n == 0) return;
  add_inplace_kernel<<<detail::grid_stride_blocks(n), kThreads, 0, stream>>>(out, inp, n);
  CUDA_CHECK(cudaGetLastError());
}

void sum(double* out, const float* inp, int64_t n, cudaStream_t stream) {
  detail::check_count(n, "cuda::sum");
  detail::launch_cluster_sum(out, inp, n, Identity{}, stream);
}

void accumulate_mean(double* acc, const float* inp, int64_t n, double divisor, double num,
                     double den, cudaStream_t stream) {
  detail::check_count(n, "cuda::accumulate_mean");
  detail::launch_cluster_sum(acc, inp, n, Identity{}, stream, AddMean{divisor, num, den});
}

}  // namespace etr::cuda
