// Internal to the CUDA bf16 kernel set (runtime/kernels/cuda/bf16/): 16-byte vector
// access to bf16 buffers (8 values per load or store), the conversions, and the launch
// shape of the element-wise kernels.
//
//   float f[8];
//   load8(p, f);        // p 16-byte aligned: one 128-bit load, widened to fp32
//   store8(q, f);       // rounded to nearest even (as runtime/dtype.h), one 128-bit store
//
// etr::bf16 (runtime/dtype.h) and __nv_bfloat16 hold the same 16 bits; nv() reinterprets
// the set's pointers. A kernel takes the vector path only when every pointer it touches is
// 16-byte aligned (aligned16); the last n % 8 elements, and every element of a launch with
// an unaligned pointer, go through the scalar path.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

#include "runtime/dtype.h"

namespace etr::cuda::detail {

static_assert(sizeof(__nv_bfloat16) == sizeof(etr::bf16), "bf16 layouts differ");

constexpr int kVec = 8;  // bf16 values per 16-byte access

inline __nv_bfloat16* nv(etr::bf16* p) {
  return reinterpret_cast<__nv_bfloat16*>(p);
}
inline const __nv_bfloat16* nv(const etr::bf16* p) {
  return reinterpret_cast<const __nv_bfloat16*>(p);
}

// True when every non-null pointer is 16-byte aligned.
inline bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

__device__ inline float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ inline __nv_bfloat16 to_bf16(float x) {
  return __float2bfloat16_rn(x);
}

__device__ inline void load8(const __nv_bfloat16* p, float (&f)[kVec]) {
  const int4 raw = *reinterpret_cast<const int4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < kVec / 2; ++k) {
    const float2 two = __bfloat1622float2(h[k]);
    f[2 * k] = two.x;
    f[2 * k + 1] = two.y;
  }
}

__device__ inline void store8(__nv_bfloat16* p, const float (&f)[kVec]) {
  int4 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < kVec / 2; ++k) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
  *reinterpret_cast<int4*>(p) = raw;
}

// Element-wise launches: Op has `__device__ void vec(int64_t i) const` (elements
// [i, i + 8), i a multiple of 8, pointers aligned) and `__device__ void one(int64_t i)
// const`. Threads stride over the n / 8 vectors (when `vector`), then over the tail.
template <typename Op>
__global__ void map_kernel(Op op, int64_t n, bool vector) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vectors = vector ? n / kVec : 0;
  for (int64_t v = first; v < vectors; v += stride) op.vec(v * kVec);
  for (int64_t i = vectors * kVec + first; i < n; i += stride) op.one(i);
}

constexpr int kMapThreads = 256;
constexpr int64_t kMapBlocks = 8192;

// Blocks for n elements taken 8 at a time (or 1 at a time when !vector).
inline int map_blocks(int64_t n, bool vector) {
  const int64_t items = vector ? (n + kVec - 1) / kVec : n;
  const int64_t blocks = (items + kMapThreads - 1) / kMapThreads;
  return static_cast<int>(blocks < kMapBlocks ? (blocks > 0 ? blocks : 1) : kMapBlocks);
}

__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

}  // namespace etr::cuda::detail
