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
#include "runtime/kernels/cuda/bf16/layernorm_bf16.h"

namespace etr::cuda {
namespace {

using detail::nv;
using detail::warp_sum;

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;
constexpr int64_t kMaxRowBlocks = 65536;
constexpr int kColumnTile = 32;
constexpr int kRowGroups = 32;

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

// Block (kColumnTile, kRowGroups); grid ceil(C / kColumnTile): thread (tx, ty) sums rows
// ty, ty + 32, ... of column tx in fp64, then row 0 adds the 32 partials in order.
__global__ void __launch_bounds__(kColumnTile* kRowGroups)
    dweight_dbias_kernel(float* __restrict__ dweight, float* __restrict__ dbias,
                         const __nv_bfloat16* __restrict__ dout,
                         const __nv_bfloat16* __restrict__ inp, const float* __restrict__ mean,
                         const float* __restrict__ rstd, int64_t N, int64_t C) {
  __shared__ double part_w[kRowGroups][kColumnTile];
  __shared__ double part_b[kRowGroups][kColumnTile];
  const int tx = static_cast<int>(threadIdx.x);
  const int ty = static_cast<int>(threadIdx.y);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColumnTile + tx;
  double dw = 0.0, db = 0.0;
  if (c < C) {
    for (int64_t n = ty; n < N; n += kRowGroups) {
      const float d = detail::to_f32(dout[n * C + c]);
      dw += d * ((detail::to_f32(inp[n * C + c]) - mean[n]) * rstd[n]);
      db += d;
    }
  }
  part_w[ty][tx] = dw;
  part_b[ty][tx] = db;
  __syncthreads();
  if (ty == 0 && c < C) {
    double sum_w = 0.0, sum_b = 0.0;
    for (int j = 0; j < kRowGroups; ++j) {
      sum_w += part_w[j][tx];
      sum_b += part_b[j][tx];
    }
    dweight[c] += static_cast<float>(sum_w);
    dbias[c] += static_cast<float>(sum_b);
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
  const int64_t tiles = (C + kColumnTile - 1) / kColumnTile;
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
  dweight_dbias_kernel<<<static_cast<unsigned>(tiles), dim3(kColumnTile, kRowGroups), 0, stream>>>(
      dweight, dbias, nv(dout), nv(inp), mean, rstd, N, C);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace etr::cuda
