// AdamW update, gradient norm and clipping (contract in adamw.h).
//
// The update and the clipping are grid-stride loops with 64-bit indices (at most
// kGridStrideBlocks x kGridStrideThreads (grid_stride.cuh) threads cover any n). The norm is the
// deterministic cluster reduction of deterministic_sum.cuh over g^2 in double. Clipping reads the
// squared norm from device memory in every thread (one cached 8-byte load), so no host ever waits
// on it.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/adamw.h"
#include "runtime/kernels/cuda/deterministic_sum.cuh"
#include "runtime/kernels/cuda/grid_stride.cuh"

namespace etr::cuda {
namespace {

constexpr int kThreads = detail::kGridStrideThreads;

// The constants of one step, rounded to float as etr::AdamW::update_range rounds them.
struct StepConstants {
  float b1, b2, c1, c2, eps, lr, decay;
};

// The expression of runtime/adamw.cc's update(), term by term; with `p16` (mixed
// precision) also the new parameter rounded to bf16 (nearest even) in the same pass.
__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g,
                             float* __restrict__ m, float* __restrict__ v,
                             __nv_bfloat16* __restrict__ p16, int64_t n, StepConstants k) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float gi = g[i];
    const float mi = k.b1 * m[i] + (1.0f - k.b1) * gi;
    const float vi = k.b2 * v[i] + (1.0f - k.b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / k.c1, vhat = vi / k.c2;
    const float pi = p[i];
    const float updated = pi - k.lr * (mhat / (sqrtf(vhat) + k.eps) + k.decay * pi);
    p[i] = updated;
    if (p16 != nullptr) p16[i] = __float2bfloat16_rn(updated);
  }
}

__global__ void to_bf16_kernel(__nv_bfloat16* __restrict__ out, const float* __restrict__ in,
                               int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = __float2bfloat16_rn(in[i]);
  }
}

// etr::clip_grad_norm's rule: no change unless norm > max_norm (a NaN norm scales by NaN,
// as on the CPU); the host has already returned for max_norm <= 0.
__global__ void clip_kernel(float* __restrict__ grads, int64_t n,
                            const double* __restrict__ norm_squared, double max_norm) {
  const double norm = sqrt(*norm_squared);
  if (norm <= max_norm) return;
  const float s = static_cast<float>(max_norm / (norm + 1e-6));
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    grads[i] *= s;
  }
}

struct Square {
  __device__ double operator()(float x) const {
    const double d = x;
    return d * d;
  }
};

}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, int64_t t,
                  double lr, double beta1, double beta2, double eps, double weight_decay,
                  cudaStream_t stream) {
  adamw_update(params, grads, m, v, nullptr, n, t, lr, beta1, beta2, eps, weight_decay, stream);
}

void adamw_update(float* params, const float* grads, float* m, float* v, uint16_t* params_bf16,
                  int64_t n, int64_t t, double lr, double beta1, double beta2, double eps,
                  double weight_decay, cudaStream_t stream) {
  detail::check_count(n, "cuda::adamw_update");
  if (t < 1) {
    throw InvalidArgument("cuda::adamw_update got optimizer step t = " + std::to_string(t) +
                          "; steps count from 1 (the bias corrections divide by 1 - beta^t)");
  }
  if (n == 0) return;
  const StepConstants k{static_cast<float>(beta1),
                        static_cast<float>(beta2),
                        static_cast<float>(1.0 - std::pow(beta1, static_cast<double>(t))),
                        static_cast<float>(1.0 - std::pow(beta2, static_cast<double>(t))),
                        static_cast<float>(eps),
                        static_cast<float>(lr),
                        static_cast<float>(weight_decay)};
  adamw_kernel<<<detail::grid_stride_blocks(n), kThreads, 0, stream>>>(
      params, grads, m, v, reinterpret_cast<__nv_bfloat16*>(params_bf16), n, k);
  CUDA_CHECK(cudaGetLastError());
}

void to_bf16(uint16_t* out, const float* in, int64_t n, cudaStream_t stream) {
  detail::check_count(n, "cuda::to_bf16");
  if (n == 0) return;
  to_bf16_kernel<<<detail::grid_stride_blocks(n), kThreads, 0, stream>>>(
      reinterpret_cast<__nv_bfloat16*>(out), in, n);
  CUDA_CHECK(cudaGetLastError());
}

void grad_norm_squared(double* norm_squared, const float* grads, int64_t n, cudaStream_t stream) {
  detail::check_count(n, "cuda::grad_norm_squared");
  detail::launch_cluster_sum(norm_squared, grads, n, Square{}, stream);
}

void clip_grad_norm(float* grads, int64_t n, const double* norm_squared, double max_norm,
                    cudaStream_t stream) {
  detail::check_count(n, "cuda::clip_grad_norm");
  if (n == 0 || !(max_norm > 0)) return;  // etr::clip_grad_norm: factor 1, nothing scaled
  clip_kernel<<<detail::grid_stride_blocks(n), kThreads, 0, stream>>>(grads, n, norm_squared,
                                                                      max_norm);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace etr::cuda
