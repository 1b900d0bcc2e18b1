// softmax_xent (softmax_xent.h): logits [N, Vp], targets [N], losses [N], dlogits [N, Vp].
//
// One block of kThreads threads per row (blocks step over rows when N exceeds the grid).
// Pass 1 reads the row once: thread t keeps the running maximum m and the sum s of
// exp(x - m) over the columns v = t, t + kThreads, ...; the block combines the (m, s)
// pairs by a fixed tree. Pass 2 (forward_backward only) reads the row again and writes
// each gradient once: exp(x - max) * (dloss / sum), minus dloss at the target. With
// dlogits == logits, every element is read and then written by the same thread in pass 2,
// and the target logit is read in pass 1, before the block barrier that ends it.
#include <cmath>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/softmax_xent.h"

namespace etr::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

// A running maximum and the sum of exp(x - m) over the values seen; {-inf, 0} is empty.
struct MaxSum {
  float m;
  float s;
};

__device__ inline MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};  // both empty: exp(-inf - -inf) would be NaN
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

// The block's (max, sum) by a fixed tree, returned to every thread. Starts and ends with
// the whole block past a barrier, so the shared arrays can be reused for the next row and
// no thread returns before every thread has finished reading its row (pass 1).
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

// dlogits is nullptr (and unused) when !kBackward. No __restrict__ on logits and dlogits:
// they may be the same buffer.
template <bool kBackward>
__global__ void __launch_bounds__(kThreads)
    softmax_xent_kernel(float* losses, float* dlogits, const float* logits,
                        const int32_t* __restrict__ targets, float dloss, int64_t N, int64_t V,
                        int64_t Vp) {
  __shared__ MaxSum warp_parts[kWarps];
  __shared__ MaxSum total;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const float* x = logits + n * Vp;
    const int32_t target = targets[n];  // the same for the whole block: uniform branches
    if (target < 0) {
      if (threadIdx.x == 0) losses[n] = 0.0f;
      if constexpr (kBackward) {
        float* d = dlogits + n * Vp;
        for (int64_t v = threadIdx.x; v < Vp; v += kThreads) d[v] = 0.0f;
      }
      continue;
    }
    const bool in_range = target < V;
    // Thread 0 reads the target's logit before the barriers of block_combine, so before
    // any thread of the block overwrites it in place.
    const float target_logit = threadIdx.x == 0 && in_range ? x[target] : 0.0f;
    MaxSum acc{-INFINITY, 0.0f};
    for (int64_t v = threadIdx.x; v < V; v += kThreads) {
      const float xv = x[v];
      if (xv > acc.m) {
        acc.s = acc.s * expf(acc.m - xv) + 1.0f;
        acc.m = xv;
      } else {
        acc.s += expf(xv - acc.m);
      }
    }
    const MaxSum row = block_combine(acc, warp_parts, &total);
    if (threadIdx.x == 0) {
      losses[n] = in_range ? logf(row.s) + (row.m - target_logit) : NAN;
    }
    if constexpr (kBackward) {
      float* d = dlogits + n * Vp;
      const float scale = dloss / row.s;
      for (int64_t v = threadIdx.x; v < V; v += kThreads) {
        float g = expf(x[v] - row.m) * scale;
        if (v == target) g -= dloss;
        d[v] = in_range ? g : NAN;
      }
      for (int64_t v = V + threadIdx.x; v < Vp; v += kThreads) d[v] = 0.0f;
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
void launch(float* losses, float* dlogits, const float* logits, const int32_t* targets, float dloss,
            int64_t N, int64_t V, int64_t Vp, cudaStream_t stream) {
  const int blocks = static_cast<int>(N < kMaxBlocks ? N : kMaxBlocks);
  softmax_xent_kernel<kBackward>
      <<<blocks, kThreads, 0, stream>>>(losses, dlogits, logits, targets, dloss, N, V, Vp);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void softmax_xent_forward(float* losses, const float* logits, const int32_t* targets, int64_t N,
                          int64_t V, int64_t Vp, cudaStream_t stream) {
  check_sizes(N, V, Vp, "cuda::softmax_xent_forward");
  if (N == 0) return;
  launch<false>(losses, nullptr, logits, targets, 0.0f, N, V, Vp, stream);
}

void softmax_xent_forward_backward(float* losses, float* dlogits, const float* logits,
                                   const int32_t* targets, float dloss, int64_t N, int64_t V,
                                   int64_t Vp, cudaStream_t stream) {
  check_sizes(N, V, Vp, "cuda::softmax_xent_forward_backward");
  if (N == 0) return;
  launch<true>(losses, dlogits, logits, targets, dloss, N, V, Vp, stream);
}

}  // namespace etr::cuda
