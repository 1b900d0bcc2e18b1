// layernorm forward/backward on the GPU (contract in layernorm.h):
//   inp [N, C], weight [C], bias [C], out [N, C], mean [N], rstd [N];
//   dout [N, C], dinp [N, C], dweight [C], dbias [C].
//
// Layout:
// - Forward and dinp: one warp per row, kRowsPerBlock rows per block, a grid-stride loop
//   over rows (the row is the same for all 32 lanes, so the loop and the shuffles are
//   warp-uniform). Lane l reads elements l, l + 32, ... of the row: coalesced for any C,
//   odd C included. Row sums are lane partials in element order, then an xor butterfly;
//   float addition is commutative, so every lane ends with the same bits.
// - dweight, dbias: column sums over all N rows, without atomics. A block owns 32 columns;
//   its 32 x 32 threads sum rows ty, ty + 32, ... of column tx (a warp reads 32 adjacent
//   floats of one row), and warp 0 then adds the 32 partials in order. The partials are f64
//   (the terms are f32 products, as on the CPU): a column sums all N rows, and f32 sums of
//   10^5 and more rows would drift from the exact sum by 1e-6 to 1e-5 relative; f64 adds
//   cost nothing in a pass bound by memory. The grid is ceil(C / 32) blocks: C-bound
//   parallelism (24 blocks at C 768), which is enough for a pass that moves 2 N C floats;
//   a split over rows as well would need scratch memory, which kernels do not allocate
//   (kernels.h).
#include <algorithm>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/layernorm.h"

namespace etr::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // warps (rows at a time) per block of the row kernels
constexpr int64_t kMaxRowBlocks = 65536;
constexpr int kColumnTile = 32;  // columns per block of the dweight/dbias kernel
constexpr int kRowGroups = 32;   // row-strided partial sums per column

__device__ inline float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void forward_kernel(float* __restrict__ out, float* __restrict__ mean,
                               float* __restrict__ rstd, const float* __restrict__ inp,
                               const float* __restrict__ weight, const float* __restrict__ bias,
                               int64_t N, int64_t C, float eps) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  const float inv_c = 1.0f / static_cast<float>(C);
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; n < N;
       n += warps) {
    const float* x = inp + n * C;
    float sum = 0.0f;
    for (int64_t i = lane; i < C; i += kWarp) sum += x[i];
    const float m = warp_sum(sum) * inv_c;
    float sq = 0.0f;  // two passes: no cancellation when |mean| >> std
    for (int64_t i = lane; i < C; i += kWarp) {
      const float centred = x[i] - m;
      sq += centred * centred;
    }
    const float s = 1.0f / sqrtf(warp_sum(sq) * inv_c + eps);
    float* y = out + n * C;
    for (int64_t i = lane; i < C; i += kWarp) y[i] = (x[i] - m) * s * weight[i] + bias[i];
    if (lane == 0) {
      if (mean != nullptr) mean[n] = m;
      if (rstd != nullptr) rstd[n] = s;
    }
  }
}

// dinp += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dout * weight.
__global__ void dinp_kernel(float* __restrict__ dinp, const float* __restrict__ dout,
                            const float* __restrict__ inp, const float* __restrict__ weight,
                            const float* __restrict__ mean, const float* __restrict__ rstd,
                            int64_t N, int64_t C) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  const float inv_c = 1.0f / static_cast<float>(C);
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; n < N;
       n += warps) {
    const float* x = inp + n * C;
    const float* d = dout + n * C;
    const float m = mean[n];
    const float s = rstd[n];
    float sum_g = 0.0f;
    float sum_gx = 0.0f;
    for (int64_t i = lane; i < C; i += kWarp) {
      const float g = d[i] * weight[i];
      sum_g += g;
      sum_gx += g * ((x[i] - m) * s);
    }
    const float mean_g = warp_sum(sum_g) * inv_c;
    const float mean_gx = warp_sum(sum_gx) * inv_c;
    float* dx = dinp + n * C;
    for (int64_t i = lane; i < C; i += kWarp) {
      const float xhat = (x[i] - m) * s;
      dx[i] += s * (d[i] * weight[i] - mean_g - xhat * mean_gx);
    }
  }
}

// Block (kColumnTile, kRowGroups); grid ceil(C / kColumnTile). See the file comment. The
// launch bound keeps the 1024-thread block launchable (at most 64 registers a thread).
__global__ void __launch_bounds__(kColumnTile* kRowGroups)
    dweight_dbias_kernel(float* __restrict__ dweight, float* __restrict__ dbias,
                         const float* __restrict__ dout, const float* __restrict__ inp,
                         const float* __restrict__ mean, const float* __restrict__ rstd, int64_t N,
                         int64_t C) {
  __shared__ double part_w[kRowGroups][kColumnTile];
  __shared__ double part_b[kRowGroups][kColumnTile];
  const int tx = static_cast<int>(threadIdx.x);
  const int ty = static_cast<int>(threadIdx.y);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColumnTile + tx;
  double dw = 0.0;  // f64: a column sums N rows (N 600001 in float drifts by 1e-5)
  double db = 0.0;
  if (c < C) {
    for (int64_t n = ty; n < N; n += kRowGroups) {
      const float d = dout[n * C + c];
      dw += d * ((inp[n * C + c] - mean[n]) * rstd[n]);
      db += d;
    }
  }
  part_w[ty][tx] = dw;
  part_b[ty][tx] = db;
  __syncthreads();
  if (ty == 0 && c < C) {
    double sum_w = 0.0;
    double sum_b = 0.0;
    for (int j = 0; j < kRowGroups; ++j) {  // in order: the same bits on every run
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

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, double eps, cudaStream_t stream) {
  check_sizes(N, C, "layernorm_forward");
  if (!(eps > 0)) {
    throw InvalidArgument("layernorm_forward's eps must be positive, not " + std::to_string(eps));
  }
  if (N == 0) return;
  forward_kernel<<<row_blocks(N), kRowsPerBlock * kWarp, 0, stream>>>(
      out, mean, rstd, inp, weight, bias, N, C, static_cast<float>(eps));
  CUDA_CHECK(cudaGetLastError());
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C, cudaStream_t stream) {
  check_sizes(N, C, "layernorm_backward");
  const int64_t tiles = (C + kColumnTile - 1) / kColumnTile;
  if (tiles > 0x7fffffff) {
    throw InvalidArgument("layernorm_backward: C " + std::to_string(C) +
                          " is too wide for one grid");
  }
  if (N == 0) return;
  dinp_kernel<<<row_blocks(N), kRowsPerBlock * kWarp, 0, stream>>>(dinp, dout, inp, weight, mean,
                                                                   rstd, N, C);
  CUDA_CHECK(cudaGetLastError());
  dweight_dbias_kernel<<<static_cast<unsigned>(tiles), dim3(kColumnTile, kRowGroups), 0, stream>>>(
      dweight, dbias, dout, inp, mean, rstd, N, C);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace etr::cuda
