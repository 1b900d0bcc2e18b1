// bf16 layernorm (layernorm_bf16.h): inp [N, C], weight [C], bias [C], out [N, C],
// mean [N], rstd [N] (fp32); dout [N, C], dinp [N, C], dweight [C], dbias [C] (fp32).
//
// The row kernels are templated on W, the values a lane loads at once: 8 (one 16-byte
// load) or 1. Lane l reads elements [l W, l W + W), then 32 W further, ...: a warp reads
// 512 contiguous bytes a step (W 8) or 64 (W 1).
#include <algorithm>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/bf16/bf16_vec.cuh"
#include "runtime/kernels/cuda/bf16/cublaslt.h"
#include "runtime/kernels/cuda/bf16/layernorm_bf16.h"

namespace etr::cuda {
namespace {

using detail::nv;
using detail::warp_sum;

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;
constexpr int64_t kMaxRowBlocks = 65536;

template <int W>
__device__ inline void load_w(const __nv_bfloat16* p, float (&f)[W]) {
  if constexpr (W == detail::kVec) {
    detail::load8(p, f);
  } else {
    for (int k = 0; k < W; ++k) f[k] = detail::to_f32(p[k]);
  }
}

template <int W>
__device__ inline void store_w(__nv_bfloat16* p, const float (&f)[W]) {
  if constexpr (W == detail::kVec) {
    detail::store8(p, f);
  } else {
    for (int k = 0; k < W; ++k) p[k] = detail::to_bf16(f[k]);
  }
}

template <int W>
__global__ void forward_kernel(__nv_bfloat16* __restrict__ out, float* __restrict__ mean,
                               float* __restrict__ rstd, const __nv_bfloat16* __restrict__ inp,
                               const __nv_bfloat16* __restrict__ weight,
                               const __nv_bfloat16* __restrict__ bias, int64_t N, int64_t C,
                               float eps) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  const float inv_c = 1.0f / static_cast<float>(C);
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; n < N;
       n += warps) {
    const __nv_bfloat16* x = inp + n * C;
    float v[W], w[W], b[W];
    float sum = 0.0f;
    for (int64_t i = lane * W; i < C; i += kWarp * W) {
      load_w<W>(x + i, v);
      for (int k = 0; k < W; ++k) sum += v[k];
    }
    const float m = warp_sum(sum) * inv_c;
    float sq = 0.0f;
    for (int64_t i = lane * W; i < C; i += kWarp * W) {
      load_w<W>(x + i, v);
      for (int k = 0; k < W; ++k) sq += (v[k] - m) * (v[k] - m);
    }
    const float s = 1.0f / sqrtf(warp_sum(sq) * inv_c + eps);
    __nv_bfloat16* y = out + n * C;
    for (int64_t i = lane * W; i < C; i += kWarp * W) {
      load_w<W>(x + i, v);
      load_w<W>(weight + i, w);
      load_w<W>(bias + i, b);
      for (int k = 0; k < W; ++k) v[k] = (v[k] - m) * s * w[k] + b[k];
      store_w<W>(y + i, v);
    }
    if (lane == 0) {
      if (mean != nullptr) mean[n] = m;
      if (rstd != nullptr) rstd[n] = s;
    }
  }
}

template <int W>
__global__ void dinp_kernel(__nv_bfloat16* __restrict__ dinp,
                            const __nv_bfloat16* __restrict__ dout,
                            const __nv_bfloat16* __restrict__ inp,
                            const __nv_bfloat16* __restrict__ weight,
                            const float* __restrict__ mean, const float* __restrict__ rstd,
                            int64_t N, int64_t C) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  const float inv_c = 1.0f / static_cast<float>(C);
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; n < N;
       n += warps) {
    const __nv_bfloat16* x = inp + n * C;
    const __nv_bfloat16* d = dout + n * C;
    const float m = mean[n];
    const float s = rstd[n];
    float v[W], g[W], w[W], acc[W];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t i = lane * W; i < C; i += kWarp * W) {
      load_w<W>(x + i, v);
      load_w<W>(d + i, g);
      load_w<W>(weight + i, w);
      for (int k = 0; k < W; ++k) {
        const float dx = g[k] * w[k];
        sum_g += dx;
        sum_gx += dx * ((v[k] - m) * s);
      }
    }
    const float mean_g = warp_sum(sum_g) * inv_c;
    const float mean_gx = warp_sum(sum_gx) * inv_c;
    __nv_bfloat16* out = dinp + n * C;
    for (int64_t i = lane * W; i < C; i += kWarp * W) {
      load_w<W>(x + i, v);
      load_w<W>(d + i, g);
      load_w<W>(weight + i, w);
      load_w<W>(out + i, acc);
      for (int k = 0; k < W; ++k) {
        const float xhat = (v[k] - m) * s;
        acc[k] += s * (g[k] * w[k] - mean_g - xhat * mean_gx);
      }
      store_w<W>(out + i, acc);
    }
  }
}

// ---- dweight, dbias [C] += sums over rows of dout xhat and dout: two launches ----
//
// Stage 1, grid (ceil(C / 64) column tiles, S row chunks): the block of tile t and chunk s
// takes rows [s R, min(N, (s + 1) R)), R = ceil(N / S), of columns [64 t, 64 t + 64).
// Thread (group g = x % 8, lane l = x / 8) owns columns [64 t + 8 g, + 8) and sums, in
// fp32, dout * ((x - mean) * rstd) and dout over rows first + l, first + l + 32, ... in
// that order; one 16-byte load of dout and one of inp a row when C % 8 == 0 and both are
// 16-byte aligned, else scalar loads (the same sums). The 32 lanes' sums are added in lane
// order through shared memory. With S == 1 the block adds its totals into dweight and
// dbias; else it stores them as partials [S, 2, C] (fp32, the stream's cuBLASLt workspace)
// and stage 2, one thread a value, adds the S partials in chunk order and the total into
// dweight or dbias once. The order depends only on N and C.

constexpr int kSumThreads = 256;
constexpr int kSumGroups = 8;                        // 8-column groups a tile
constexpr int kSumCols = kSumGroups * detail::kVec;  // 64 columns a tile
constexpr int kSumLanes = kSumThreads / kSumGroups;  // 32 row lanes
constexpr int kSumUnroll = 4;                        // rows a lane loads at once
constexpr int64_t kMinChunkRows = 256;
constexpr int64_t kMaxChunks = 64;

// Values [col0, col0 + 8) of a row, zeros past `cols`.
template <bool Vec>
__device__ inline void load_cols(const __nv_bfloat16* row, int64_t col0, int64_t cols,
                                 float (&f)[detail::kVec]) {
  if constexpr (Vec) {
    detail::load8(row + col0, f);  // cols % 8 == 0: the whole group is in range
  } else {
#pragma unroll
    for (int k = 0; k < detail::kVec; ++k) {
      f[k] = col0 + k < cols ? detail::to_f32(row[col0 + k]) : 0.0f;
    }
  }
}

// Row n's terms added to the lane's sums (the per-row formula of the CPU reference).
template <bool Vec>
struct RowTerms {
  float d[detail::kVec], x[detail::kVec], m, s;
  __device__ void load(const __nv_bfloat16* dout, const __nv_bfloat16* inp, const float* mean,
                       const float* rstd, int64_t n, int64_t col0, int64_t C) {
    load_cols<Vec>(dout + n * C, col0, C, d);
    load_cols<Vec>(inp + n * C, col0, C, x);
    m = mean[n];
    s = rstd[n];
  }
  __device__ void add(float (&dw)[detail::kVec], float (&db)[detail::kVec]) const {
#pragma unroll
    for (int k = 0; k < detail::kVec; ++k) {
      dw[k] += d[k] * ((x[k] - m) * s);
      db[k] += d[k];
    }
  }
};

template <bool Vec>
__global__ void __launch_bounds__(kSumThreads)
    dweight_dbias_chunk_kernel(float* __restrict__ dweight, float* __restrict__ dbias,
                               float* __restrict__ partials, const __nv_bfloat16* __restrict__ dout,
                               const __nv_bfloat16* __restrict__ inp,
                               const float* __restrict__ mean, const float* __restrict__ rstd,
                               int64_t N, int64_t C, int64_t chunk_rows) {
  __shared__ __align__(16) float lanes[2][kSumLanes][kSumCols];  // dweight, dbias sums
  const int group = static_cast<int>(threadIdx.x) % kSumGroups;
  const int lane = static_cast<int>(threadIdx.x) / kSumGroups;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kSumCols;
  const int64_t col0 = tile0 + group * detail::kVec;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t end = first + chunk_rows < N ? first + chunk_rows : N;
  float dw[detail::kVec] = {}, db[detail::kVec] = {};
  if (col0 < C) {
    int64_t n = first + lane;
    for (; n + (kSumUnroll - 1) * kSumLanes < end; n += kSumUnroll * kSumLanes) {
      RowTerms<Vec> rows[kSumUnroll];
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u) {
        rows[u].load(dout, inp, mean, rstd, n + u * kSumLanes, col0, C);
      }
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u) rows[u].add(dw, db);
    }
    for (; n < end; n += kSumLanes) {
      RowTerms<Vec> row;
      row.load(dout, inp, mean, rstd, n, col0, C);
      row.add(dw, db);
    }
  }
  float4* w4 = reinterpret_cast<float4*>(&lanes[0][lane][group * detail::kVec]);
  float4* b4 = reinterpret_cast<float4*>(&lanes[1][lane][group * detail::kVec]);
  w4[0] = make_float4(dw[0], dw[1], dw[2], dw[3]);
  w4[1] = make_float4(dw[4], dw[5], dw[6], dw[7]);
  b4[0] = make_float4(db[0], db[1], db[2], db[3]);
  b4[1] = make_float4(db[4], db[5], db[6], db[7]);
  __syncthreads();
  // Threads [0, 64) total dweight's columns, [64, 128) dbias's.
  const int which = static_cast<int>(threadIdx.x) / kSumCols;
  const int tx = static_cast<int>(threadIdx.x) % kSumCols;
  const int64_t c = tile0 + tx;
  if (which < 2 && c < C) {
    float total = lanes[which][0][tx];
    for (int l = 1; l < kSumLanes; ++l) total += lanes[which][l][tx];
    if (gridDim.y == 1) {
      (which == 0 ? dweight : dbias)[c] += total;
    } else {
      partials[(static_cast<int64_t>(blockIdx.y) * 2 + which) * C + c] = total;
    }
  }
}

// Value i of [dweight | dbias] (i < 2 C) += partials[0, i] + partials[1, i] + ... (chunk
// order), one thread a value.
__global__ void add_partials_kernel(float* __restrict__ dweight, float* __restrict__ dbias,
                                    const float* __restrict__ partials, int chunks, int64_t C) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < 2 * C;
       i += stride) {
    float total = partials[i];
    for (int s = 1; s < chunks; ++s) total += partials[s * 2 * C + i];
    if (i < C) {
      dweight[i] += total;
    } else {
      dbias[i - C] += total;
    }
  }
}

// Row chunks for N rows: >= kMinChunkRows rows each, at most kMaxChunks, and no more than
// the workspace holds partials [chunks, 2, C] fp32 for.
int64_t row_chunks(int64_t N, int64_t C) {
  const int64_t want = std::clamp<int64_t>(N / kMinChunkRows, 1, kMaxChunks);
  const int64_t fit = static_cast<int64_t>(kLtWorkspaceBytes / sizeof(float)) / (2 * C);
  return std::max<int64_t>(1, std::min(want, fit));
}

void dweight_dbias(float* dweight, float* dbias, const __nv_bfloat16* dout,
                   const __nv_bfloat16* inp, const float* mean, const float* rstd, int64_t N,
                   int64_t C, cudaStream_t stream) {
  const int64_t chunks = row_chunks(N, C);
  const int64_t chunk_rows = (N + chunks - 1) / chunks;
  float* partials = nullptr;
  if (chunks > 1) {
    const LtWorkspace ws = cublaslt_workspace(stream);
    if (static_cast<size_t>(chunks * 2 * C) * sizeof(float) > ws.bytes) {
      throw InvalidArgument("layernorm_backward (bf16): partials exceed the workspace");
    }
    partials = static_cast<float*>(ws.ptr);
  }
  const dim3 grid(static_cast<unsigned>((C + kSumCols - 1) / kSumCols),
                  static_cast<unsigned>(chunks));
  if (C % detail::kVec == 0 && detail::aligned16({dout, inp})) {
    dweight_dbias_chunk_kernel<true><<<grid, kSumThreads, 0, stream>>>(
        dweight, dbias, partials, dout, inp, mean, rstd, N, C, chunk_rows);
  } else {
    dweight_dbias_chunk_kernel<false><<<grid, kSumThreads, 0, stream>>>(
        dweight, dbias, partials, dout, inp, mean, rstd, N, C, chunk_rows);
  }
  CUDA_CHECK(cudaGetLastError());
  if (chunks > 1) {
    const int threads = 256;
    const int blocks =
        static_cast<int>(std::min<int64_t>((2 * C + threads - 1) / threads, kMaxRowBlocks));
    add_partials_kernel<<<blocks, threads, 0, stream>>>(dweight, dbias, partials,
                                                        static_cast<int>(chunks), C);
    CUDA_CHECK(cudaGetLastError());
  }
}

void check_sizes(int64_t N, int64_t C, const char* what) {
  if (N < 0 || C < 1) {
    throw InvalidArgument(std::string(what) + " needs N >= 0 and C > 0, not N " +
                          std::to_string(N) + ", C " + std::to_string(C));
  }
}

int row_blocks(int64_t N) {
  return static_cast<int>(
      std::min<int64_t>((N + kRowsPerBlock - 1) / kRowsPerBlock, kMaxRowBlocks));
}

}  // namespace

void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                       const bf16* bias, int64_t N, int64_t C, double eps, cudaStream_t stream) {
  check_sizes(N, C, "layernorm_forward (bf16)");
  if (!(eps > 0)) {
    throw InvalidArgument("layernorm_forward's eps must be positive, not " + std::to_string(eps));
  }
  if (N == 0) return;
  const bool vec = C % detail::kVec == 0 && detail::aligned16({out, inp, weight, bias});
  const int blocks = row_blocks(N), threads = kRowsPerBlock * kWarp;
  const float e = static_cast<float>(eps);
  if (vec) {
    forward_kernel<detail::kVec><<<blocks, threads, 0, stream>>>(nv(out), mean, rstd, nv(inp),
                                                                 nv(weight), nv(bias), N, C, e);
  } else {
    forward_kernel<1><<<blocks, threads, 0, stream>>>(nv(out), mean, rstd, nv(inp), nv(weight),
                                                      nv(bias), N, C, e);
  }
  CUDA_CHECK(cudaGetLastError());
}

void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int64_t N,
                        int64_t C, cudaStream_t stream) {
  check_sizes(N, C, "layernorm_backward (bf16)");
  const int64_t tiles = (C + kSumCols - 1) / kSumCols;
  if (tiles > 0x7fffffff) {
    throw InvalidArgument("layernorm_backward: C " + std::to_string(C) +
                          " is too wide for one grid");
  }
  if (N == 0) return;
  const bool vec = C % detail::kVec == 0 && detail::aligned16({dinp, dout, inp, weight});
  const int blocks = row_blocks(N), threads = kRowsPerBlock * kWarp;
  if (vec) {
    dinp_kernel<detail::kVec>
        <<<blocks, threads, 0, stream>>>(nv(dinp), nv(dout), nv(inp), nv(weight), mean, rstd, N, C);
  } else {
    dinp_kernel<1>
        <<<blocks, threads, 0, stream>>>(nv(dinp), nv(dout), nv(inp), nv(weight), mean, rstd, N, C);
  }
  CUDA_CHECK(cudaGetLastError());
  dweight_dbias(dweight, dbias, nv(dout), nv(inp), mean, rstd, N, C, stream);
}

}  // namespace etr::cuda
