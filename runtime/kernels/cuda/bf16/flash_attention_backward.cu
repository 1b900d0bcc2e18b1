// The flash attention's backward (flash_attention_tiles.cuh has the tiles and products).
#include "runtime/kernels/cuda/bf16/flash_attention_tiles.cuh"

#include <algorithm>
#include <cmath>

namespace etr::cuda::flash {
namespace {

// Dsum[b, h, t] = sum_d dout[b, t, h HS + d] out[b, t, h HS + d]: a warp per (b, t, h).
template <int HS>
__global__ void flash_dsum_kernel(float* __restrict__ dsum, const Bf* __restrict__ dout,
                                  const Bf* __restrict__ out, int64_t rows, int T, int NH) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < rows;
       r += warps) {
    const int64_t bt = r / NH;
    const int h = static_cast<int>(r % NH);
    float part = 0.0f;
    if (lane < HS / kVec) {
      float a[kVec], o[kVec];
      const int64_t at = bt * NH * HS + h * HS + lane * kVec;
      load8(dout + at, a);
      load8(out + at, o);
#pragma unroll
      for (int k = 0; k < kVec; ++k) part += a[k] * o[k];
    }
    part = warp_sum(part);
    if (lane == 0) dsum[((bt / T) * NH + h) * T + bt % T] = part;
  }
}

// dK and dV of one key tile: one block per (key tile, head, sequence), walking the query
// tiles from the diagonal on; the first key tile (most query tiles) first.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dkdv_kernel(Bf* __restrict__ dqkv, const Bf* __restrict__ dout,
                               const Bf* __restrict__ qkv, const float* __restrict__ lse,
                               const float* __restrict__ dsum, int T, int NH, int64_t C,
                               float scale) {
  using Lay = Layout<HS>;
  extern __shared__ __align__(128) unsigned char smem[];
  Bf* ks = reinterpret_cast<Bf*>(smem);
  Bf* vs = reinterpret_cast<Bf*>(smem + Lay::kTile);
  Bf* qs = reinterpret_cast<Bf*>(smem + 2 * Lay::kTile);  // qs, dos: the staging tile after
  Bf* dos = reinterpret_cast<Bf*>(smem + 3 * Lay::kTile);
  float* sf = reinterpret_cast<float*>(smem + 4 * Lay::kTile);
  Bf* ps = reinterpret_cast<Bf*>(smem + 4 * Lay::kTile + Lay::kScore);
  float* lse_s = reinterpret_cast<float*>(smem + 4 * Lay::kTile + Lay::kScore + Lay::kProb);
  float* dsum_s = lse_s + kBlock;
  const int kb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int k0 = kb * kBlock, lane = threadIdx.x % 32, r0 = (threadIdx.x / 32) * kRows;
  const int64_t ld = 3 * C, stats = (static_cast<int64_t>(b) * NH + h) * T;
  const Bf* q_base = qkv + static_cast<int64_t>(b) * T * ld + h * HS;
  const Bf* do_base = dout + static_cast<int64_t>(b) * T * C + h * HS;

  load_tile<HS>(ks, q_base + C, ld, k0, T);
  load_tile<HS>(vs, q_base + 2 * C, ld, k0, T);
  FragC dk[HS / 16], dv[HS / 16];
  zero_strip<HS>(dk);
  zero_strip<HS>(dv);
  for (int qb = kb; qb < static_cast<int>(gridDim.x); ++qb) {
    const int q0 = qb * kBlock;
    __syncthreads();  // the previous query tile is consumed
    load_tile<HS>(qs, q_base, ld, q0, T);
    load_tile<HS>(dos, do_base, C, q0, T);
    load_stats(lse_s, dsum_s, lse + stats, dsum + stats, q0, T);
    __syncthreads();
    score_strip<HS, wmma::col_major>(sf + r0 * kLdS, ks + r0 * Lay::kLd, Lay::kLd, qs, Lay::kLd);
    __syncwarp();
    recompute_probs<true>(sf, ps, lse_s, r0, k0, q0, T, scale, lane);  // P^T
    __syncwarp();
    mma_strip<HS, kBlock, wmma::row_major>(dv, ps + r0 * kLdP, kLdP, dos, Lay::kLd);
    score_strip<HS, wmma::col_major>(sf + r0 * kLdS, vs + r0 * Lay::kLd, Lay::kLd, dos,
                                     Lay::kLd);  // dP^T = V dO^T
    __syncwarp();
    score_grads<true>(sf, ps, dsum_s, r0, lane);  // dS^T
    __syncwarp();
    mma_strip<HS, kBlock, wmma::row_major>(dk, ps + r0 * kLdP, kLdP, qs, Lay::kLd);
  }
  __syncthreads();  // every warp is done with qs and dos: they become the staging tile
  float* stage = reinterpret_cast<float*>(qs);
  Bf* dk_base = dqkv + static_cast<int64_t>(b) * T * ld + C + h * HS;
  add_strip<HS>(dk_base + C, ld, stage, dv, 1.0f, r0, k0 + r0, T, lane);
  add_strip<HS>(dk_base, ld, stage, dk, scale, r0, k0 + r0, T, lane);
}

// dQ of one query tile: one block per (query tile, head, sequence), walking the key tiles
// up to the diagonal; the last query tile (most key tiles) first.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dq_kernel(Bf* __restrict__ dqkv, const Bf* __restrict__ dout,
                             const Bf* __restrict__ qkv, const float* __restrict__ lse,
                             const float* __restrict__ dsum, int T, int NH, int64_t C,
                             float scale) {
  using Lay = Layout<HS>;
  extern __shared__ __align__(128) unsigned char smem[];
  Bf* ks = reinterpret_cast<Bf*>(smem);  // ks, vs: the staging tile after the loop
  Bf* vs = reinterpret_cast<Bf*>(smem + Lay::kTile);
  Bf* qs = reinterpret_cast<Bf*>(smem + 2 * Lay::kTile);
  Bf* dos = reinterpret_cast<Bf*>(smem + 3 * Lay::kTile);
  float* sf = reinterpret_cast<float*>(smem + 4 * Lay::kTile);
  Bf* ps = reinterpret_cast<Bf*>(smem + 4 * Lay::kTile + Lay::kScore);
  float* lse_s = reinterpret_cast<float*>(smem + 4 * Lay::kTile + Lay::kScore + Lay::kProb);
  float* dsum_s = lse_s + kBlock;
  const int qb = static_cast<int>(gridDim.x - 1 - blockIdx.x), h = blockIdx.y, b = blockIdx.z;
  const int q0 = qb * kBlock, lane = threadIdx.x % 32, r0 = (threadIdx.x / 32) * kRows;
  const int64_t ld = 3 * C, stats = (static_cast<int64_t>(b) * NH + h) * T;
  const Bf* q_base = qkv + static_cast<int64_t>(b) * T * ld + h * HS;

  load_tile<HS>(qs, q_base, ld, q0, T);
  load_tile<HS>(dos, dout + static_cast<int64_t>(b) * T * C + h * HS, C, q0, T);
  load_stats(lse_s, dsum_s, lse + stats, dsum + stats, q0, T);
  FragC dq[HS / 16];
  zero_strip<HS>(dq);
  for (int kb = 0; kb <= qb; ++kb) {
    __syncthreads();  // the previous key tile is consumed (and Q, dO, stats are in place)
    load_tile<HS>(ks, q_base + C, ld, kb * kBlock, T);
    load_tile<HS>(vs, q_base + 2 * C, ld, kb * kBlock, T);
    __syncthreads();
    score_strip<HS, wmma::col_major>(sf + r0 * kLdS, qs + r0 * Lay::kLd, Lay::kLd, ks, Lay::kLd);
    __syncwarp();
    recompute_probs<false>(sf, ps, lse_s, r0, q0, kb * kBlock, T, scale, lane);
    __syncwarp();
    score_strip<HS, wmma::col_major>(sf + r0 * kLdS, dos + r0 * Lay::kLd, Lay::kLd, vs,
                                     Lay::kLd);  // dP = dO V^T
    __syncwarp();
    score_grads<false>(sf, ps, dsum_s, r0, lane);
    __syncwarp();
    mma_strip<HS, kBlock, wmma::row_major>(dq, ps + r0 * kLdP, kLdP, ks, Lay::kLd);
  }
  __syncthreads();  // every warp is done with ks and vs: they become the staging tile
  add_strip<HS>(dqkv + static_cast<int64_t>(b) * T * ld + h * HS, ld, reinterpret_cast<float*>(ks),
                dq, scale, r0, q0 + r0, T, lane);
}

template <int HS>
void launch_backward_hs(Bf* dqkv, float* dsum, const Bf* dout, const Bf* qkv, const float* lse,
                     const Bf* out, int64_t B, int64_t T, int64_t C, int64_t NH, float scale,
                     cudaStream_t stream) {
  const int64_t rows = B * T * NH;
  constexpr int kRowsPerBlock = 8;
  const int64_t blocks = std::min<int64_t>((rows + kRowsPerBlock - 1) / kRowsPerBlock, 1 << 20);
  flash_dsum_kernel<HS><<<static_cast<unsigned>(blocks), 32 * kRowsPerBlock, 0, stream>>>(
      dsum, dout, out, rows, static_cast<int>(T), static_cast<int>(NH));
  CUDA_CHECK(cudaGetLastError());
  const dim3 grid(static_cast<unsigned>((T + kBlock - 1) / kBlock), static_cast<unsigned>(NH),
                  static_cast<unsigned>(B));
  constexpr size_t smem = Layout<HS>::kBackward;
  prepare<flash_backward_dkdv_kernel<HS>, smem>();
  flash_backward_dkdv_kernel<HS><<<grid, kThreads, smem, stream>>>(
      dqkv, dout, qkv, lse, dsum, static_cast<int>(T), static_cast<int>(NH), C, scale);
  CUDA_CHECK(cudaGetLastError());
  prepare<flash_backward_dq_kernel<HS>, smem>();
  flash_backward_dq_kernel<HS><<<grid, kThreads, smem, stream>>>(
      dqkv, dout, qkv, lse, dsum, static_cast<int>(T), static_cast<int>(NH), C, scale);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_backward(int hs, Bf* dqkv, float* dsum, const Bf* dout, const Bf* qkv,
                     const float* lse, const Bf* out, int64_t B, int64_t T, int64_t C, int64_t NH,
                     float scale, cudaStream_t stream) {
  if (hs == 64) {
    launch_backward_hs<64>(dqkv, dsum, dout, qkv, lse, out, B, T, C, NH, scale, stream);
  } else {
    launch_backward_hs<128>(dqkv, dsum, dout, qkv, lse, out, B, T, C, NH, scale, stream);
  }
}

}  // namespace etr::cuda::flash
