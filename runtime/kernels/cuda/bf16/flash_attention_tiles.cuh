// The flash attention's shared pieces (flash_attention.cu, flash_attention_forward.cu,
// flash_attention_backward.cu): tile sizes and shared-memory layout, the WMMA products of
// a warp's 16-row strip, tile loads and stores, and the launchers of the two halves.
//
// Shared-memory tiles (64 rows each, padded rows so that wmma's 32-byte fragment pointers
// line up and rows fall on different banks):
//   bf16 [64, HS + 8]  Q, K, V, dO tiles          fp32 [64, 68]  S or dP of a tile pair
//   bf16 [64, 72]      P, then dS                  fp32 [64, HS + 4]  O (forward), staging
// Warp w owns rows [16 w, 16 w + 16) of every tile, so between the block-wide loads of a
// tile the warps need only __syncwarp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <mma.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <type_traits>

#include "runtime/cuda_check.h"
#include "runtime/kernels/cuda/bf16/bf16_vec.cuh"

namespace etr::cuda::flash {

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

// The forward of head size HS (64 or 128): out and the log-sum-exp lse [B, NH, T].
void launch_forward(int hs, Bf* out, float* lse, const Bf* qkv, int64_t B, int64_t T, int64_t C,
                    int64_t NH, float scale, cudaStream_t stream);
// The backward: Dsum into `dsum` [B, NH, T], then dK and dV, then dQ, each added into dqkv.
void launch_backward(int hs, Bf* dqkv, float* dsum, const Bf* dout, const Bf* qkv,
                     const float* lse, const Bf* out, int64_t B, int64_t T, int64_t C, int64_t NH,
                     float scale, cudaStream_t stream);

}  // namespace etr::cuda::flash
