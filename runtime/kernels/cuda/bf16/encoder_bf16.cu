// bf16 encoder (encoder_bf16.h): tokens [B, T], wte [Vp, C], wpe [maxT, C], out [B, T, C]
// (bf16); dout [B, T, C] (bf16), dwte [Vp, C], dwpe [maxT, C] (fp32).
//
// forward: bf16_vec.cuh's map over the B T C outputs, 8 at a time when C % 8 == 0 (a
// vector then never crosses a row). dwte: the fp32 set's protocol (runtime/kernels/cuda/
// encoder.cu): warp w owns channel tile w % tiles and the interleaved vocabulary bucket
// w / tiles (ids v with v % buckets == bucket); it walks the ids 32 at a time, a ballot
// marks its own, and it adds them lowest position first, a lane a channel, keeping the
// row being summed in a register while the id repeats. dwpe: a thread an element, adding
// the B batch rows in b order.
#include <math_constants.h>

#include <algorithm>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/bf16/bf16_vec.cuh"
#include "runtime/kernels/cuda/bf16/encoder_bf16.h"
#include "runtime/kernels/cuda/grid_stride.cuh"

namespace etr::cuda {
namespace {

using detail::kVec;
using detail::nv;
using detail::to_f32;

constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr int64_t kTargetWarps = 4096;

struct ForwardOp {
  __nv_bfloat16* out;
  const int32_t* tokens;
  const __nv_bfloat16* wte;
  const __nv_bfloat16* wpe;
  int64_t T, C, V;
  __device__ void vec(int64_t i) const {
    const int64_t bt = i / C, c = i - bt * C, t = bt % T;
    const int64_t token = tokens[bt];
    float x[kVec], p[kVec];
    if (token >= 0 && token < V) {
      detail::load8(wte + token * C + c, x);
      detail::load8(wpe + t * C + c, p);
#pragma unroll
      for (int k = 0; k < kVec; ++k) x[k] += p[k];
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) x[k] = CUDART_NAN_F;
    }
    detail::store8(out + i, x);
  }
  __device__ void one(int64_t i) const {
    const int64_t bt = i / C, c = i - bt * C, t = bt % T;
    const int64_t token = tokens[bt];
    const float x = (token >= 0 && token < V) ? to_f32(wte[token * C + c]) + to_f32(wpe[t * C + c])
                                              : CUDART_NAN_F;
    out[i] = detail::to_bf16(x);
  }
};

__global__ void dwpe_kernel(float* __restrict__ dwpe, const __nv_bfloat16* __restrict__ dout,
                            int64_t B, int64_t TC) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < TC;
       i += stride) {
    float acc = dwpe[i];
    for (int64_t b = 0; b < B; ++b) acc += to_f32(dout[b * TC + i]);
    dwpe[i] = acc;
  }
}

__global__ void dwte_kernel(float* __restrict__ dwte, const __nv_bfloat16* __restrict__ dout,
                            const int32_t* __restrict__ tokens, int64_t BT, int64_t C, int64_t V,
                            int64_t tiles, int32_t buckets) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t warp =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (warp >= tiles * buckets) return;  // the whole warp: the ballots below need all lanes
  const int32_t bucket = static_cast<int32_t>(warp / tiles);
  const int64_t c = (warp % tiles) * kWarp + lane;
  const bool active = c < C;
  int32_t row = -1;
  float acc = 0.0f;
  for (int64_t base = 0; base < BT; base += kWarp) {
    const int64_t p = base + lane;
    const int32_t token = p < BT ? tokens[p] : -1;
    const bool mine = token >= 0 && token < V && token % buckets == bucket;
    unsigned hits = __ballot_sync(0xffffffffu, mine);
    while (hits != 0) {
      const int j = __ffs(static_cast<int>(hits)) - 1;
      hits &= hits - 1;
      const int32_t id = __shfl_sync(0xffffffffu, token, j);
      if (id != row) {
        if (row >= 0 && active) dwte[static_cast<int64_t>(row) * C + c] = acc;
        row = id;
        if (active) acc = dwte[static_cast<int64_t>(id) * C + c];
      }
      if (active) acc += to_f32(dout[(base + j) * C + c]);
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

void encoder_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int64_t B,
                     int64_t T, int64_t C, int64_t V, cudaStream_t stream) {
  check_sizes(B, T, C, V, "encoder_forward (bf16)");
  if (B == 0 || T == 0 || C == 0) return;
  const int64_t n = B * T * C;
  const bool vec = C % kVec == 0 && detail::aligned16({out, wte, wpe});
  const ForwardOp op{nv(out), tokens, nv(wte), nv(wpe), T, C, V};
  detail::map_kernel<ForwardOp>
      <<<detail::map_blocks(n, vec), detail::kMapThreads, 0, stream>>>(op, n, vec);
  CUDA_CHECK(cudaGetLastError());
}

void encoder_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int64_t B,
                      int64_t T, int64_t C, int64_t V, cudaStream_t stream) {
  check_sizes(B, T, C, V, "encoder_backward (bf16)");
  const int64_t tiles = (C + kWarp - 1) / kWarp;
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
      dwte, nv(dout), tokens, B * T, C, V, tiles, static_cast<int32_t>(buckets));
  CUDA_CHECK(cudaGetLastError());
  dwpe_kernel<<<detail::grid_stride_blocks(T * C), detail::kGridStrideThreads, 0, stream>>>(
      dwpe, nv(dout), B, T * C);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace etr::cuda
