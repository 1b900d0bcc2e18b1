// encoder forward/backward on the GPU (contract in encoder.h): tokens [B, T], wte [Vp, C],
// wpe [maxT, C], out [B, T, C]; dout [B, T, C], dwte [Vp, C], dwpe [maxT, C].
//
// forward and dwpe: grid-stride loops over elements with 64-bit indices; dwpe's thread for
// element (t, c) adds the B batch rows in b order onto the old value, as the CPU does.
//
// dwte without atomics (the protocol): warp w owns channel tile w % tiles (32 channels, a
// lane each) and vocabulary bucket w / tiles, the ids v with v % buckets == bucket.
// Interleaved buckets, not contiguous ranges: GPT-2's most frequent ids (" the" 262,
// "," 11, " and" 290, ...) all lie below 300, and a contiguous bucket would serialise most
// of a batch on one warp. The warp walks the B * T ids 32 at a time; a ballot marks those
// in its bucket, and it visits them lowest position first, each lane adding dout[p, c] into
// row tokens[p] of its channel. No other thread writes those (row, channel) elements, so
// the adds need no atomics, and each row's sum runs in position order onto the old value:
// the CPU's order, hence the CPU's bits. The row being summed is kept in a register while
// the same id repeats and written back when the id changes (a later visit reloads it).
#include <math_constants.h>

#include <algorithm>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/encoder.h"
#include "runtime/kernels/cuda/grid_stride.cuh"

namespace etr::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kThreads = detail::kGridStrideThreads;  // the grid-stride kernels' shape
// (channel tile, bucket) warps of the dwte kernel: enough to fill an H100/H200 (132 SMs)
// several times over, few enough that the ids are not re-read needlessly often.
constexpr int64_t kTargetWarps = 4096;

__global__ void forward_kernel(float* __restrict__ out, const int32_t* __restrict__ tokens,
                               const float* __restrict__ wte, const float* __restrict__ wpe,
                               int64_t BT, int64_t T, int64_t C, int64_t V) {
  const int64_t n = BT * C;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t bt = i / C;
    const int64_t c = i - bt * C;
    const int64_t t = bt % T;
    const int64_t token = tokens[bt];
    // An id outside the vocabulary (trusted, not checked: encoder.h) poisons its position
    // instead of reading out of bounds.
    out[i] = (token >= 0 && token < V) ? wte[token * C + c] + wpe[t * C + c] : CUDART_NAN_F;
  }
}

// dwpe[t, c] += dout[0, t, c] + ... + dout[B-1, t, c], one add at a time in b order.
__global__ void dwpe_kernel(float* __restrict__ dwpe, const float* __restrict__ dout, int64_t B,
                            int64_t TC) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < TC;
       i += stride) {
    float acc = dwpe[i];
    for (int64_t b = 0; b < B; ++b) acc += dout[b * TC + i];
    dwpe[i] = acc;
  }
}

// See the file comment. Launched with exactly tiles * buckets warps (or a partial last
// block, whose spare warps return at once).
__global__ void dwte_kernel(float* __restrict__ dwte, const float* __restrict__ dout,
                            const int32_t* __restrict__ tokens, int64_t BT, int64_t C, int64_t V,
                            int64_t tiles, int32_t buckets) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t warp =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (warp >= tiles * buckets) return;  // the whole warp: the ballots below need all 32 lanes
  const int32_t bucket = static_cast<int32_t>(warp / tiles);
  const int64_t c = (warp % tiles) * kWarp + lane;
  const bool active = c < C;  // the last tile of an odd C has idle lanes
  int32_t row = -1;           // the id whose element acc holds, -1 for none
  float acc = 0.0f;
  for (int64_t base = 0; base < BT; base += kWarp) {
    const int64_t p = base + lane;
    const int32_t token = p < BT ? tokens[p] : -1;
    const bool mine = token >= 0 && token < V && token % buckets == bucket;
    unsigned hits = __ballot_sync(0xffffffffu, mine);
    while (hits != 0) {  // warp-uniform: hits is the same in every lane
      const int j = __ffs(static_cast<int>(hits)) - 1;
      hits &= hits - 1;
      const int32_t id = __shfl_sync(0xffffffffu, token, j);
      if (id != row) {
        if (row >= 0 && active) dwte[static_cast<int64_t>(row) * C + c] = acc;
        row = id;
        if (active) acc = dwte[static_cast<int64_t>(id) * C + c];
      }
      if (active) acc += dout[(base + j) * C + c];
    }
  }
  if (row >= 0 && active) dwte[static_cast<int64_t>(row) * C + c] = acc;
}

void check_sizes(int64_t B, int64_t T, int64_t C, int64_t V, const char* what) {
  if (B < 0 || T < 0 || C < 0 || V < 1) {
    throw InvalidArgument(std::string(what) + " needs B, T, C >= 0 and V > 0, not B " +
                          std::to_string(B) + ", T " + std::to_string(T) + ", C " +
                          std::to_string(C) + ", V " + std::to_string(V));
  }
}

}  // namespace

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                     int64_t B, int64_t T, int64_t C, int64_t V, cudaStream_t stream) {
  check_sizes(B, T, C, V, "encoder_forward");
  if (B == 0 || T == 0 || C == 0) return;
  forward_kernel<<<detail::grid_stride_blocks(B * T * C), kThreads, 0, stream>>>(
      out, tokens, wte, wpe, B * T, T, C, V);
  CUDA_CHECK(cudaGetLastError());
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                      int64_t T, int64_t C, int64_t V, cudaStream_t stream) {
  check_sizes(B, T, C, V, "encoder_backward");
  const int64_t tiles = (C + kWarp - 1) / kWarp;
  // Buckets: ceil(kTargetWarps / tiles), at most V (an empty bucket is a wasted warp) and
  // at least 1; an int32 since ids are.
  const int64_t buckets =
      std::clamp<int64_t>((kTargetWarps + tiles - 1) / std::max<int64_t>(tiles, 1), 1,
                          std::min<int64_t>(V, kTargetWarps));
  const int64_t warps_per_block = kThreads / kWarp;
  const int64_t dwte_blocks = (tiles * buckets + warps_per_block - 1) / warps_per_block;
  if (dwte_blocks > 0x7fffffff) {
    throw InvalidArgument("encoder_backward: C " + std::to_string(C) + " is too wide for one grid");
  }
  if (B == 0 || T == 0 || C == 0) return;
  dwte_kernel<<<static_cast<unsigned>(dwte_blocks), kThreads, 0, stream>>>(
      dwte, dout, tokens, B * T, C, V, tiles, static_cast<int32_t>(buckets));
  CUDA_CHECK(cudaGetLastError());
  dwpe_kernel<<<detail::grid_stride_blocks(T * C), kThreads, 0, stream>>>(dwpe, dout, B, T * C);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace etr::cuda
