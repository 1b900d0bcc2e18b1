// The flash attention's forward (flash_attention_tiles.cuh has the tiles and products).
#include "runtime/kernels/cuda/bf16/flash_attention_tiles.cuh"

#include <cmath>

namespace etr::cuda::flash {
namespace {

// One block per (query tile, head, sequence), the last query tile (most key tiles) first.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(Bf* __restrict__ out, float* __restrict__ lse, const Bf* __restrict__ qkv,
                         int T, int NH, int64_t C, float scale) {
  using Lay = Layout<HS>;
  extern __shared__ __align__(128) unsigned char smem[];
  Bf* qs = reinterpret_cast<Bf*>(smem);
  Bf* ks = reinterpret_cast<Bf*>(smem + Lay::kTile);
  Bf* vs = reinterpret_cast<Bf*>(smem + 2 * Lay::kTile);
  float* ss = reinterpret_cast<float*>(smem + 3 * Lay::kTile);
  Bf* ps = reinterpret_cast<Bf*>(smem + 3 * Lay::kTile + Lay::kScore);
  float* os = reinterpret_cast<float*>(smem + 3 * Lay::kTile + Lay::kScore + Lay::kProb);
  float* inv_l =
      reinterpret_cast<float*>(smem + 3 * Lay::kTile + Lay::kScore + Lay::kProb + Lay::kAcc);
  const int qb = static_cast<int>(gridDim.x - 1 - blockIdx.x), h = blockIdx.y, b = blockIdx.z;
  const int q0 = qb * kBlock, lane = threadIdx.x % 32, r0 = (threadIdx.x / 32) * kRows;
  const int64_t ld = 3 * C;
  const Bf* q_base = qkv + static_cast<int64_t>(b) * T * ld + h * HS;

  load_tile<HS>(qs, q_base, ld, q0, T);
  for (int i = threadIdx.x; i < kBlock * Lay::kLdO; i += kThreads) os[i] = 0.0f;
  float m[kRows], l[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }

  for (int kb = 0; kb <= qb; ++kb) {
    __syncthreads();  // the previous tile's K and V are consumed; Q and O are in place
    load_tile<HS>(ks, q_base + C, ld, kb * kBlock, T);
    load_tile<HS>(vs, q_base + 2 * C, ld, kb * kBlock, T);
    __syncthreads();
    score_strip<HS, wmma::col_major>(ss + r0 * kLdS, qs + r0 * Lay::kLd, Lay::kLd, ks, Lay::kLd);
    __syncwarp();
    softmax_update<HS>(ss, ps, os, m, l, r0, q0, kb * kBlock, T, scale, lane);
    __syncwarp();
    FragC o[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) {
      wmma::load_matrix_sync(o[n], os + r0 * Lay::kLdO + n * 16, Lay::kLdO, wmma::mem_row_major);
    }
    mma_strip<HS, kBlock, wmma::row_major>(o, ps + r0 * kLdP, kLdP, vs, Lay::kLd);
    store_strip<HS>(os + r0 * Lay::kLdO, Lay::kLdO, o);
  }
  __syncwarp();
  float* lse_bh = lse + (static_cast<int64_t>(b) * NH + h) * T;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (lane == 0) {
      inv_l[r0 + r] = 1.0f / l[r];
      if (q0 + r0 + r < T) lse_bh[q0 + r0 + r] = m[r] + logf(l[r]);
    }
  }
  __syncwarp();
  constexpr int kChunks = HS / kVec;
  for (int c = lane; c < kRows * kChunks; c += 32) {
    const int row = r0 + c / kChunks, col = (c % kChunks) * kVec, q = q0 + row;
    if (q >= T) continue;
    float f[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) f[k] = os[row * Lay::kLdO + col + k] * inv_l[row];
    store8(out + (b * static_cast<int64_t>(T) + q) * C + h * HS + col, f);
  }
}

template <int HS>
void launch_forward_hs(Bf* out, float* lse, const Bf* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                    float scale, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((T + kBlock - 1) / kBlock), static_cast<unsigned>(NH),
                  static_cast<unsigned>(B));
  prepare<flash_forward_kernel<HS>, Layout<HS>::kForward>();
  flash_forward_kernel<HS><<<grid, kThreads, Layout<HS>::kForward, stream>>>(
      out, lse, qkv, static_cast<int>(T), static_cast<int>(NH), C, scale);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_forward(int hs, Bf* out, float* lse, const Bf* qkv, int64_t B, int64_t T, int64_t C,
                    int64_t NH, float scale, cudaStream_t stream) {
  if (hs == 64) {
    launch_forward_hs<64>(out, lse, qkv, B, T, C, NH, scale, stream);
  } else {
    launch_forward_hs<128>(out, lse, qkv, B, T, C, NH, scale, stream);
  }
}

}  // namespace etr::cuda::flash
