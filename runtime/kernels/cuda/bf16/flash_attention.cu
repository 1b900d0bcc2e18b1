// Flash attention, bf16 (flash_attention.h): qkv [B, T, 3C], out [B, T, C], lse [B, NH, T]
// fp32 in att; dout [B, T, C], dqkv [B, T, 3C], Dsum [B, NH, T] fp32 in scratch.
//
// Shared-memory tiles (64 rows each, padded rows so that wmma's 32-byte fragment pointers
// line up and rows fall on different banks):
//   bf16 [64, HS + 8]  Q, K, V, dO tiles          fp32 [64, 68]  S or dP of a tile pair
//   bf16 [64, 72]      P, then dS                  fp32 [64, HS + 4]  O (forward), staging
// Warp w owns rows [16 w, 16 w + 16) of every tile, so between the block-wide loads of a
// tile the warps need only __syncwarp.
#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/bf16/bf16_vec.cuh"
#include "runtime/kernels/cuda/bf16/flash_attention.h"

namespace etr::cuda {
namespace {

namespace wmma = nvcuda::wmma;
using detail::kVec;
using detail::load8;
using detail::nv;
using detail::store8;
using detail::to_bf16;
using detail::to_f32;
using detail::warp_max;
using detail::warp_sum;
using Bf = __nv_bfloat16;

constexpr int kBlock = 64;  // rows of a query tile and of a key tile
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = kBlock / kWarps;  // rows of a tile a warp owns
constexpr int kLdS = kBlock + 4;        // fp32 [64, 64] tiles
constexpr int kLdP = kBlock + 8;        // bf16 [64, 64] tiles
constexpr int64_t kMaxGrid = 65535;     // gridDim.y and .z

template <int HS>
struct Layout {
  static constexpr int kLd = HS + 8;   // bf16 [64, HS] tiles
  static constexpr int kLdO = HS + 4;  // fp32 [64, HS] tiles
  static constexpr size_t kTile = size_t{kBlock} * kLd * sizeof(Bf);
  static constexpr size_t kScore = size_t{kBlock} * kLdS * sizeof(float);
  static constexpr size_t kProb = size_t{kBlock} * kLdP * sizeof(Bf);
  static constexpr size_t kAcc = size_t{kBlock} * kLdO * sizeof(float);
  static constexpr size_t kStats = 2 * kBlock * sizeof(float);
  static constexpr size_t kForward = 3 * kTile + kScore + kProb + kAcc + kStats;
  static constexpr size_t kBackward = 4 * kTile + kScore + kProb + kStats;
  static_assert(kAcc <= 2 * kTile, "the backward stages its fp32 result in two tiles");
  static_assert(kTile % 128 == 0 && kScore % 128 == 0 && kProb % 128 == 0 && kAcc % 128 == 0);
};

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf, wmma::row_major>;
template <typename L>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf, L>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Tile (k, n) of B [K, N]: stored row-major [K][N] (row_major), or as B^T [N][K] (col_major).
template <typename L>
__device__ __forceinline__ const Bf* b_tile(const Bf* b, int ldb, int k, int n) {
  if constexpr (std::is_same_v<L, wmma::col_major>) {
    return b + n * 16 * ldb + k * 16;
  } else {
    return b + k * 16 * ldb + n * 16;
  }
}

// acc[n] += A [16, K] B [K, 16 n .. 16 n + 16) for n < N / 16; A row-major (lda).
template <int N, int K, typename L>
__device__ __forceinline__ void mma_strip(FragC (&acc)[N / 16], const Bf* a, int lda, const Bf* b,
                                          int ldb) {
#pragma unroll
  for (int k = 0; k < K / 16; ++k) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + k * 16, lda);
#pragma unroll
    for (int n = 0; n < N / 16; ++n) {
      FragB<L> fb;
      wmma::load_matrix_sync(fb, b_tile<L>(b, ldb, k, n), ldb);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

template <int N>
__device__ __forceinline__ void zero_strip(FragC (&acc)[N / 16]) {
#pragma unroll
  for (int n = 0; n < N / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
}

template <int N>
__device__ __forceinline__ void store_strip(float* out, int ldo, const FragC (&acc)[N / 16]) {
#pragma unroll
  for (int n = 0; n < N / 16; ++n) {
    wmma::store_matrix_sync(out + n * 16, acc[n], ldo, wmma::mem_row_major);
  }
}

// out [16, 64] (fp32, ldo) = A [16, K] B [K, 64], one accumulator at a time (few registers).
template <int K, typename L>
__device__ __forceinline__ void score_strip(float* out, const Bf* a, int lda, const Bf* b,
                                            int ldb) {
#pragma unroll
  for (int n = 0; n < kBlock / 16; ++n) {
    FragC c;
    wmma::fill_fragment(c, 0.0f);
#pragma unroll
    for (int k = 0; k < K / 16; ++k) {
      FragA fa;
      FragB<L> fb;
      wmma::load_matrix_sync(fa, a + k * 16, lda);
      wmma::load_matrix_sync(fb, b_tile<L>(b, ldb, k, n), ldb);
      wmma::mma_sync(c, fa, fb, c);
    }
    wmma::store_matrix_sync(out + n * 16, c, kLdS, wmma::mem_row_major);
  }
}

// Rows [row0, row0 + 64) of a [T, ld] bf16 matrix, columns [0, HS) from src, into a tile;
// rows at or past T as zeros. All threads of the block.
template <int HS>
__device__ __forceinline__ void load_tile(Bf* tile, const Bf* src, int64_t ld, int row0, int T) {
  constexpr int kChunks = HS / kVec;
  for (int c = threadIdx.x; c < kBlock * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * kVec;
    int4 v = make_int4(0, 0, 0, 0);
    if (row0 + r < T) v = *reinterpret_cast<const int4*>(src + (row0 + r) * ld + col);
    *reinterpret_cast<int4*>(tile + r * Layout<HS>::kLd + col) = v;
  }
}

// lse and Dsum of the 64 queries from q0 (0 past T). All threads of the block.
__device__ __forceinline__ void load_stats(float* lse_s, float* dsum_s, const float* lse,
                                           const float* dsum, int q0, int T) {
  for (int i = threadIdx.x; i < kBlock; i += kThreads) {
    const bool in = q0 + i < T;
    lse_s[i] = in ? lse[q0 + i] : 0.0f;
    dsum_s[i] = in ? dsum[q0 + i] : 0.0f;
  }
}

// Forward, the warp's 16 rows of one key tile: causal mask, online softmax update of m
// and l, P (bf16) into ps, the rows of O rescaled by exp(m_old - m_new).
template <int HS>
__device__ __forceinline__ void softmax_update(const float* ss, Bf* ps, float* os,
                                               float (&m)[kRows], float (&l)[kRows], int r0, int q0,
                                               int k0, int T, float scale, int lane) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int row = r0 + r, q = q0 + row;
    float s[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int c = lane + 32 * i, key = k0 + c;
      s[i] = (key <= q && key < T) ? ss[row * kLdS + c] * scale : -INFINITY;
    }
    const float m_new = fmaxf(m[r], warp_max(fmaxf(s[0], s[1])));
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing yet
    const float alpha = __expf(m[r] - base);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float p = __expf(s[i] - base);
      sum += p;
      ps[row * kLdP + lane + 32 * i] = to_bf16(p);
    }
    l[r] = l[r] * alpha + warp_sum(sum);
    m[r] = m_new;
    for (int d = lane; d < HS; d += 32) os[row * Layout<HS>::kLdO + d] *= alpha;
  }
}

// Backward: P = exp(scale S - lse) where key <= query < T, else 0, for the warp's 16 rows
// of the tile in sf, into ps. kKeyRows: rows are keys, columns queries (S^T, dK/dV kernel);
// else rows are queries (dQ kernel). row0, col0: the tile's first row and column.
template <bool kKeyRows>
__device__ __forceinline__ void recompute_probs(const float* sf, Bf* ps, const float* lse_s, int r0,
                                                int row0, int col0, int T, float scale, int lane) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int row = r0 + r;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int c = lane + 32 * i;
      const int q = kKeyRows ? col0 + c : row0 + row;
      const int key = kKeyRows ? row0 + row : col0 + c;
      const float lse = lse_s[kKeyRows ? c : row];
      const float p = (key <= q && q < T) ? __expf(sf[row * kLdS + c] * scale - lse) : 0.0f;
      ps[row * kLdP + c] = to_bf16(p);
    }
  }
}

// dS = P (dP - Dsum) in fp32 from the bf16 P in ps and the fp32 dP in dpf; into ps.
template <bool kKeyRows>
__device__ __forceinline__ void score_grads(const float* dpf, Bf* ps, const float* dsum_s, int r0,
                                            int lane) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int row = r0 + r;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int c = lane + 32 * i;
      const float ds =
          to_f32(ps[row * kLdP + c]) * (dpf[row * kLdS + c] - dsum_s[kKeyRows ? c : row]);
      ps[row * kLdP + c] = to_bf16(ds);
    }
  }
}

// dst[t] += factor acc for the warp's 16 rows t = row0 + r < T of a [T, ld] bf16 matrix,
// through the warp's rows of the fp32 staging tile; one bf16 rounding an element.
template <int HS>
__device__ __forceinline__ void add_strip(Bf* dst, int64_t ld, float* stage,
                                          const FragC (&acc)[HS / 16], float factor, int r0,
                                          int row0, int T, int lane) {
  constexpr int kLdO = Layout<HS>::kLdO, kChunks = HS / kVec;
  store_strip<HS>(stage + r0 * kLdO, kLdO, acc);
  __syncwarp();
  for (int c = lane; c < kRows * kChunks; c += 32) {
    const int r = c / kChunks, col = (c % kChunks) * kVec, t = row0 + r;
    if (t >= T) continue;
    Bf* p = dst + t * ld + col;
    float g[kVec];
    load8(p, g);
#pragma unroll
    for (int k = 0; k < kVec; ++k) g[k] += stage[(r0 + r) * kLdO + col + k] * factor;
    store8(p, g);
  }
  __syncwarp();
}

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

bool env_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("ETR_FLASH_ATTENTION");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

// Validates the sizes for the flash path; returns hs.
int64_t check_flash(const char* who, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const std::string w = std::string(who) + " (bf16 flash attention)";
  if (B < 0 || T < 0 || C <= 0 || NH <= 0 || C % NH != 0) {
    throw InvalidArgument(w + " needs B, T >= 0, C, NH > 0 and NH dividing C (B " +
                          std::to_string(B) + ", T " + std::to_string(T) + ", C " +
                          std::to_string(C) + ", NH " + std::to_string(NH) + ")");
  }
  const int64_t hs = C / NH;
  if (hs != 64 && hs != 128) {
    throw InvalidArgument(w + " supports head sizes 64 and 128, not " + std::to_string(hs));
  }
  if (B > kMaxGrid || NH > kMaxGrid || T > INT_MAX - kBlock) {
    throw InvalidArgument(w + ": B = " + std::to_string(B) + " or NH = " + std::to_string(NH) +
                          " above 65535, or T = " + std::to_string(T) + " too large");
  }
  return hs;
}

void check_aligned(const char* who, const void* p, const char* name, uintptr_t bytes) {
  if (reinterpret_cast<uintptr_t>(p) % bytes != 0) {
    throw InvalidArgument(std::string(who) + " (bf16 flash attention) needs " + name +
                          " aligned to " + std::to_string(bytes) +
                          " bytes (the allocator's buffers are)");
  }
}

int64_t stats_numel(int64_t B, int64_t T, int64_t NH) {
  return (2 * B * NH * T + 7) / 8 * 8;  // fp32 [B, NH, T] as bf16 elements, to 16 bytes
}

constexpr int kMaxDevices = 64;  // devices with a remembered opt-in; others opt in every launch

// Opts Kernel in to Smem bytes of dynamic shared memory on the current device, once per
// (kernel, device): the attribute belongs to the function on that device and stays set.
// A device's flag is set only after the call succeeded; the mutex keeps two threads from
// both calling (harmless, but needless).
template <auto Kernel, size_t Smem>
void prepare() {
  static std::atomic<bool> done[kMaxDevices];  // value-initialised: false
  static std::mutex mu;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const bool tracked = device >= 0 && device < kMaxDevices;
  if (tracked && done[device].load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mu);
  if (tracked && done[device].load(std::memory_order_relaxed)) return;
  CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(Smem)));
  if (tracked) done[device].store(true, std::memory_order_release);
}

template <int HS>
void launch_forward(Bf* out, float* lse, const Bf* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                    float scale, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((T + kBlock - 1) / kBlock), static_cast<unsigned>(NH),
                  static_cast<unsigned>(B));
  prepare<flash_forward_kernel<HS>, Layout<HS>::kForward>();
  flash_forward_kernel<HS><<<grid, kThreads, Layout<HS>::kForward, stream>>>(
      out, lse, qkv, static_cast<int>(T), static_cast<int>(NH), C, scale);
  CUDA_CHECK(cudaGetLastError());
}

template <int HS>
void launch_backward(Bf* dqkv, float* dsum, const Bf* dout, const Bf* qkv, const float* lse,
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

bool flash_attention_enabled(int64_t C, int64_t NH) {
  if (!env_enabled() || C <= 0 || NH <= 0 || C % NH != 0) return false;
  return C / NH == 64 || C / NH == 128;
}

int64_t flash_attention_saved_numel(int64_t B, int64_t T, int64_t C, int64_t NH) {
  check_flash("attention_saved_numel", B, T, C, NH);
  return stats_numel(B, T, NH);
}

int64_t flash_attention_backward_scratch_size(int64_t B, int64_t T, int64_t C, int64_t NH) {
  check_flash("attention_backward_scratch_size", B, T, C, NH);
  return stats_numel(B, T, NH);
}

void flash_attention_forward(bf16* out, bf16* att, const bf16* qkv, int64_t B, int64_t T, int64_t C,
                             int64_t NH, cudaStream_t stream) {
  const char* who = "attention_forward";
  const int64_t hs = check_flash(who, B, T, C, NH);
  if (B == 0 || T == 0) return;
  check_aligned(who, out, "out", 16);
  check_aligned(who, qkv, "qkv", 16);
  check_aligned(who, att, "att", 4);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* lse = reinterpret_cast<float*>(att);
  if (hs == 64) {
    launch_forward<64>(nv(out), lse, nv(qkv), B, T, C, NH, scale, stream);
  } else {
    launch_forward<128>(nv(out), lse, nv(qkv), B, T, C, NH, scale, stream);
  }
}

void flash_attention_backward(bf16* dqkv, bf16* scratch, int64_t scratch_size, const bf16* dout,
                              const bf16* qkv, const bf16* att, const bf16* out, int64_t B,
                              int64_t T, int64_t C, int64_t NH, cudaStream_t stream) {
  const char* who = "attention_backward";
  const int64_t hs = check_flash(who, B, T, C, NH);
  if (B == 0 || T == 0) return;
  const int64_t need = stats_numel(B, T, NH);
  if (scratch == nullptr || scratch_size < need) {
    throw InvalidArgument("attention_backward (bf16 flash attention) needs at least " +
                          std::to_string(need) + " elements of scratch (2 B NH T), got " +
                          std::to_string(scratch == nullptr ? 0 : scratch_size));
  }
  check_aligned(who, dqkv, "dqkv", 16);
  check_aligned(who, dout, "dout", 16);
  check_aligned(who, qkv, "qkv", 16);
  check_aligned(who, out, "out", 16);
  check_aligned(who, att, "att", 4);
  check_aligned(who, scratch, "scratch", 4);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* dsum = reinterpret_cast<float*>(scratch);
  const float* lse = reinterpret_cast<const float*>(att);
  if (hs == 64) {
    launch_backward<64>(nv(dqkv), dsum, nv(dout), nv(qkv), lse, nv(out), B, T, C, NH, scale,
                        stream);
  } else {
    launch_backward<128>(nv(dqkv), dsum, nv(dout), nv(qkv), lse, nv(out), B, T, C, NH, scale,
                         stream);
  }
}

}  // namespace etr::cuda
