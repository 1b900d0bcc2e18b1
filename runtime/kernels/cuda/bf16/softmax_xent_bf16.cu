// bf16 softmax_xent (softmax_xent_bf16.h): logits [N, Vp] bf16, targets [N], losses [N]
// fp32, dlogits [N, Vp] bf16.
//
// The fp32 set's kernel (runtime/kernels/cuda/softmax_xent.cu) on bf16 rows, templated
// on W, the values a thread loads at once (8: one 16-byte access; 1). Thread t handles
// columns [t W, t W + W), then kThreads W further. With dlogits == logits each vector is
// read and then written by the same thread in pass 2, and the target logit is read in
// pass 1, before the barriers that end it.
#include <cmath>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/bf16/bf16_vec.cuh"
#include "runtime/kernels/cuda/bf16/softmax_xent_bf16.h"

namespace etr::cuda {
namespace {

using detail::nv;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

struct MaxSum {
  float m;
  float s;
};

__device__ inline MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ inline MaxSum warp_combine_to_lane0(MaxSum x) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const MaxSum other{__shfl_down_sync(0xffffffffu, x.m, offset),
                       __shfl_down_sync(0xffffffffu, x.s, offset)};
    x = combine(x, other);
  }
  return x;
}

// The block's (max, sum) by a fixed tree, returned to every thread; barriers on both
// sides (shared arrays reusable, every thread past its pass-1 reads).
__device__ MaxSum block_combine(MaxSum x, MaxSum* warp_parts, MaxSum* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  x = warp_combine_to_lane0(x);
  if (lane == 0) warp_parts[warp] = x;
  __syncthreads();
  if (warp == 0) {
    x = warp_combine_to_lane0(lane < kWarps ? warp_parts[lane] : MaxSum{-INFINITY, 0.0f});
    if (lane == 0) *total = x;
  }
  __syncthreads();
  const MaxSum result = *total;
  __syncthreads();
  return result;
}

template <int W>
__device__ inline void load_w(const __nv_bfloat16* p, float (&f)[W]) {
  if constexpr (W == detail::kVec) {
    detail::load8(p, f);
  } else {
    f[0] = detail::to_f32(*p);
  }
}

template <int W>
__device__ inline void store_w(__nv_bfloat16* p, const float (&f)[W]) {
  if constexpr (W == detail::kVec) {
    detail::store8(p, f);
  } else {
    *p = detail::to_bf16(f[0]);
  }
}

// W == 8 needs Vp % 8 == 0, so a vector starting below V ends within Vp. The column loop
// runs to V (pass 1) or to Vp (pass 2, which also writes the padding's zeros).
template <bool kBackward, int W>
__global__ void __launch_bounds__(kThreads)
    softmax_xent_kernel(float* losses, __nv_bfloat16* dlogits, const __nv_bfloat16* logits,
                        const int32_t* __restrict__ targets, float dloss, int64_t N, int64_t V,
                        int64_t Vp) {
  __shared__ MaxSum warp_parts[kWarps];
  __shared__ MaxSum total;
  const int64_t first = static_cast<int64_t>(threadIdx.x) * W, step = int64_t{kThreads} * W;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const __nv_bfloat16* x = logits + n * Vp;
    const int32_t target = targets[n];
    float v[W];
    if (target < 0) {
      if (threadIdx.x == 0) losses[n] = 0.0f;
      if constexpr (kBackward) {
        for (int k = 0; k < W; ++k) v[k] = 0.0f;
        for (int64_t c = first; c < Vp; c += step) store_w<W>(dlogits + n * Vp + c, v);
      }
      continue;
    }
    const bool in_range = target < V;
    const float target_logit = threadIdx.x == 0 && in_range ? detail::to_f32(x[target]) : 0.0f;
    MaxSum acc{-INFINITY, 0.0f};
    for (int64_t c = first; c < V; c += step) {
      load_w<W>(x + c, v);
      for (int k = 0; k < W && c + k < V; ++k) {
        if (v[k] > acc.m) {
          acc.s = acc.s * expf(acc.m - v[k]) + 1.0f;
          acc.m = v[k];
        } else {
          acc.s += expf(v[k] - acc.m);
        }
      }
    }
    const MaxSum row = block_combine(acc, warp_parts, &total);
    if (threadIdx.x == 0) losses[n] = in_range ? logf(row.s) + (row.m - target_logit) : NAN;
    if constexpr (kBackward) {
      __nv_bfloat16* d = dlogits + n * Vp;
      const float scale = dloss / row.s;
      for (int64_t c = first; c < Vp; c += step) {
        load_w<W>(x + c, v);
        for (int k = 0; k < W; ++k) {
          const int64_t col = c + k;
          float g = expf(v[k] - row.m) * scale;
          if (col == target) g -= dloss;
          v[k] = col < V ? (in_range ? g : NAN) : 0.0f;
        }
        store_w<W>(d + c, v);
      }
    }
  }
}

void check_sizes(int64_t N, int64_t V, int64_t Vp, const char* what) {
  if (N < 0 || V <= 0 || Vp < V) {
    throw InvalidArgument(std::string(what) + " needs N >= 0 and 0 < V <= Vp, got N " +
                          std::to_string(N) + ", V " + std::to_string(V) + ", Vp " +
                          std::to_string(Vp));
  }
}

template <bool kBackward>
void launch(float* losses, bf16* dlogits, const bf16* logits, const int32_t* targets, float dloss,
            int64_t N, int64_t V, int64_t Vp, cudaStream_t stream) {
  const int blocks = static_cast<int>(N < kMaxBlocks ? N : kMaxBlocks);
  const bool vec = Vp % detail::kVec == 0 && detail::aligned16({logits, dlogits});
  if (vec) {
    softmax_xent_kernel<kBackward, detail::kVec><<<blocks, kThreads, 0, stream>>>(
        losses, nv(dlogits), nv(logits), targets, dloss, N, V, Vp);
  } else {
    softmax_xent_kernel<kBackward, 1><<<blocks, kThreads, 0, stream>>>(
        losses, nv(dlogits), nv(logits), targets, dloss, N, V, Vp);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void softmax_xent_forward(float* losses, const bf16* logits, const int32_t* targets, int64_t N,
                          int64_t V, int64_t Vp, cudaStream_t stream) {
  check_sizes(N, V, Vp, "cuda::softmax_xent_forward (bf16)");
  if (N == 0) return;
  launch<false>(losses, nullptr, logits, targets, 0.0f, N, V, Vp, stream);
}

void softmax_xent_forward_backward(float* losses, bf16* dlogits, const bf16* logits,
                                   const int32_t* targets, float dloss, int64_t N, int64_t V,
                                   int64_t Vp, cudaStream_t stream) {
  check_sizes(N, V, Vp, "cuda::softmax_xent_forward_backward (bf16)");
  if (N == 0) return;
  launch<true>(losses, dlogits, logits, targets, dloss, N, V, Vp, stream);
}

}  // namespace etr::cuda
