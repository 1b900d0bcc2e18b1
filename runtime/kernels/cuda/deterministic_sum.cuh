// Internal to the CUDA kernel set (vector_ops.cu's sum, adamw.cu's grad_norm_squared): a
// deterministic double sum of term(inp[i]) over [0, n), written to one device scalar.
//
// Protocol: one thread-block cluster of kSumBlocks blocks of kSumThreads threads, the same
// on every device, so the order of every addition is fixed by n alone:
//   1. thread (b, t) adds, in increasing i, the terms i = b * kSumThreads + t + k * stride
//      (stride = kSumBlocks * kSumThreads) into a double;
//   2. each block reduces its threads' sums by a fixed tree (shuffles within a warp, then
//      warp 0 over the warps' sums) into its own shared memory;
//   3. after cluster.sync(), block 0 reads the kSumBlocks block sums through distributed
//      shared memory and adds them in rank order; a second cluster.sync() keeps every
//      block's shared memory alive until block 0 has read it.
// A cluster rather than a partial-sums buffer and a second kernel: the launch needs no
// scratch memory (the kernels allocate nothing, and a fixed global buffer would race
// between streams), and the two passes stay in one launch. kSumBlocks = 8 is the portable
// cluster size of sm_90; 8 x 1024 threads with 8 loads in flight each keeps a few SMs'
// worth of reads in flight, enough for the once-per-step sums it serves.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "runtime/cuda_check.h"

namespace etr::cuda::detail {

constexpr int kSumBlocks = 8;
constexpr int kSumThreads = 1024;
constexpr int kSumUnroll = 8;

// Adds warp lanes' values into lane 0 by a fixed tree (the other lanes hold partial sums).
__device__ inline double warp_sum_to_lane0(double x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_down_sync(0xffffffffu, x, offset);
  return x;
}

// Writes the total: *out = total.
struct AssignTotal {
  __device__ void operator()(double* out, double total) const { *out = total; }
};

// Term is a functor type with `__device__ double operator()(float) const`; callers define
// it in an unnamed namespace, so that each instantiation is private to its translation unit.
// Store (`__device__ void operator()(double* out, double total) const`) writes the total.
template <typename Term, typename Store>
__global__ void __cluster_dims__(kSumBlocks, 1, 1) __launch_bounds__(kSumThreads)
    cluster_sum_kernel(double* out, const float* __restrict__ inp, int64_t n, Term term,
                       Store store) {
  namespace cg = cooperative_groups;
  __shared__ double warp_sums[kSumThreads / 32];
  __shared__ double block_sum;

  const int64_t stride = int64_t{kSumBlocks} * kSumThreads;
  int64_t i = static_cast<int64_t>(blockIdx.x) * kSumThreads + threadIdx.x;
  double acc = 0;
  // kSumUnroll independent loads in flight, added in increasing i as the tail loop does.
  for (; i + (kSumUnroll - 1) * stride < n; i += kSumUnroll * stride) {
    float x[kSumUnroll];
#pragma unroll
    for (int k = 0; k < kSumUnroll; ++k) x[k] = inp[i + k * stride];
#pragma unroll
    for (int k = 0; k < kSumUnroll; ++k) acc += term(x[k]);
  }
  for (; i < n; i += stride) acc += term(inp[i]);

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  acc = warp_sum_to_lane0(acc);
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = warp_sum_to_lane0(warp_sums[lane]);  // kSumThreads / 32 == 32 warps: one per lane
    if (lane == 0) block_sum = acc;
  }

  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's block_sum is written and visible to the cluster
  if (cluster.block_rank() == 0 && threadIdx.x == 0) {
    double total = 0;
    for (unsigned r = 0; r < kSumBlocks; ++r) total += *cluster.map_shared_rank(&block_sum, r);
    store(out, total);
  }
  cluster.sync();  // no block exits (freeing its shared memory) before block 0 has read it
}

// Enqueues the sum on `stream`; n == 0 writes 0.0 (an empty sum) with the default Store
// (another Store is not called for n == 0), n < 0 is the caller's to reject.
template <typename Term, typename Store = AssignTotal>
void launch_cluster_sum(double* out, const float* inp, int64_t n, Term term, cudaStream_t stream,
                        Store store = {}) {
  static_assert(kSumThreads == 32 * 32, "the second tree level gives one warp sum per lane");
  if (n == 0) {
    if constexpr (std::is_same_v<Store, AssignTotal>) {
      CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double), stream));  // all-zero bits: +0.0
    }
    return;
  }
  cluster_sum_kernel<Term, Store><<<kSumBlocks, kSumThreads, 0, stream>>>(out, inp, n, term, store);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace etr::cuda::detail
