// Element-wise bf16 kernels (pointwise_bf16.h): fill, copy, add_inplace, gelu and
// residual; every buffer [n].
//
// Each operation is a functor for bf16_vec.cuh's map_kernel: vec() handles 8 elements
// with one 16-byte load per input and one 16-byte store per output, one() a single
// element. No __restrict__ where outputs may alias inputs (gelu's out == inp, residual's
// out == inp1 or inp2, add_inplace's out == inp): the element (or vector) a thread writes
// is the one it has just read, so aliasing is safe.
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/kernels/cuda/bf16/bf16_vec.cuh"
#include "runtime/kernels/cuda/bf16/pointwise_bf16.h"
#include "runtime/kernels/cuda/grid_stride.cuh"

namespace etr::cuda {
namespace {

using detail::kVec;
using detail::load8;
using detail::nv;
using detail::store8;
using detail::to_bf16;
using detail::to_f32;

constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
constexpr float kCubic = 0.044715f;

__device__ inline float gelu(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

__device__ inline float gelu_grad(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  const float t = tanhf(u);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

struct FillOp {
  uint16_t* out;
  uint16_t bits;
  __device__ void vec(int64_t i) const {
    const uint32_t two = (static_cast<uint32_t>(bits) << 16) | bits;
    const int v = static_cast<int>(two);
    *reinterpret_cast<int4*>(out + i) = make_int4(v, v, v, v);
  }
  __device__ void one(int64_t i) const { out[i] = bits; }
};

// out = f(out, inp) element-wise: add_inplace and the gelu/residual forwards share it.
template <typename F>
struct BinaryOp {
  __nv_bfloat16* out;
  const __nv_bfloat16* a;
  const __nv_bfloat16* b;
  F f;
  __device__ void vec(int64_t i) const {
    float x[kVec], y[kVec];
    load8(a + i, x);
    load8(b + i, y);
#pragma unroll
    for (int k = 0; k < kVec; ++k) x[k] = f(x[k], y[k]);
    store8(out + i, x);
  }
  __device__ void one(int64_t i) const {
    out[i] = to_bf16(f(to_f32(a[i]), to_f32(b[i])));
  }
};

struct Add {
  __device__ float operator()(float x, float y) const { return x + y; }
};
// gelu ignores its second operand (passed the input again).
struct Gelu {
  __device__ float operator()(float x, float) const { return gelu(x); }
};

struct GeluBackwardOp {
  __nv_bfloat16* dinp;
  const __nv_bfloat16* inp;
  const __nv_bfloat16* dout;
  __device__ void vec(int64_t i) const {
    float d[kVec], x[kVec], g[kVec];
    load8(dinp + i, d);
    load8(inp + i, x);
    load8(dout + i, g);
#pragma unroll
    for (int k = 0; k < kVec; ++k) d[k] += gelu_grad(x[k]) * g[k];
    store8(dinp + i, d);
  }
  __device__ void one(int64_t i) const {
    dinp[i] = to_bf16(to_f32(dinp[i]) + gelu_grad(to_f32(inp[i])) * to_f32(dout[i]));
  }
};

// dinp1 += dout and dinp2 += dout; with dinp1 == dinp2 (same) the one buffer gets both.
struct ResidualBackwardOp {
  __nv_bfloat16* d1;
  __nv_bfloat16* d2;
  const __nv_bfloat16* dout;
  bool same;
  __device__ void vec(int64_t i) const {
    float g[kVec], a[kVec];
    load8(dout + i, g);
    load8(d1 + i, a);
#pragma unroll
    for (int k = 0; k < kVec; ++k) a[k] = same ? a[k] + g[k] + g[k] : a[k] + g[k];
    store8(d1 + i, a);
    if (same) return;
    load8(d2 + i, a);
#pragma unroll
    for (int k = 0; k < kVec; ++k) a[k] += g[k];
    store8(d2 + i, a);
  }
  __device__ void one(int64_t i) const {
    const float g = to_f32(dout[i]);
    const float a = to_f32(d1[i]);
    d1[i] = to_bf16(same ? a + g + g : a + g);
    if (!same) d2[i] = to_bf16(to_f32(d2[i]) + g);
  }
};

template <typename Op>
void launch(const Op& op, int64_t n, bool vector, cudaStream_t stream) {
  detail::map_kernel<Op>
      <<<detail::map_blocks(n, vector), detail::kMapThreads, 0, stream>>>(op, n, vector);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void fill(bf16* out, bf16 value, int64_t n, cudaStream_t stream) {
  detail::check_count(n, "fill (bf16)");
  if (n == 0) return;
  launch(FillOp{reinterpret_cast<uint16_t*>(out), value.bits}, n, detail::aligned16({out}), stream);
}

// The driver's device-to-device copy: as fast as a vectorised kernel, and it needs none.
void copy(bf16* out, const bf16* inp, int64_t n, cudaStream_t stream) {
  detail::check_count(n, "copy (bf16)");
  if (n == 0 || out == inp) return;
  CUDA_CHECK(cudaMemcpyAsync(out, inp, static_cast<size_t>(n) * sizeof(bf16),
                             cudaMemcpyDeviceToDevice, stream));
}

void add_inplace(bf16* out, const bf16* inp, int64_t n, cudaStream_t stream) {
  detail::check_count(n, "add_inplace (bf16)");
  if (n == 0) return;
  launch(BinaryOp<Add>{nv(out), nv(out), nv(inp), Add{}}, n, detail::aligned16({out, inp}), stream);
}

void gelu_forward(bf16* out, const bf16* inp, int64_t n, cudaStream_t stream) {
  detail::check_count(n, "gelu_forward (bf16)");
  if (n == 0) return;
  launch(BinaryOp<Gelu>{nv(out), nv(inp), nv(inp), Gelu{}}, n, detail::aligned16({out, inp}),
         stream);
}

void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n, cudaStream_t stream) {
  detail::check_count(n, "gelu_backward (bf16)");
  if (n == 0) return;
  launch(GeluBackwardOp{nv(dinp), nv(inp), nv(dout)}, n, detail::aligned16({dinp, inp, dout}),
         stream);
}

void residual_forward(bf16* out, const bf16* inp1, const bf16* inp2, int64_t n,
                      cudaStream_t stream) {
  detail::check_count(n, "residual_forward (bf16)");
  if (n == 0) return;
  launch(BinaryOp<Add>{nv(out), nv(inp1), nv(inp2), Add{}}, n, detail::aligned16({out, inp1, inp2}),
         stream);
}

void residual_backward(bf16* dinp1, bf16* dinp2, const bf16* dout, int64_t n, cudaStream_t stream) {
  detail::check_count(n, "residual_backward (bf16)");
  if (n == 0) return;
  launch(ResidualBackwardOp{nv(dinp1), nv(dinp2), nv(dout), dinp1 == dinp2}, n,
         detail::aligned16({dinp1, dinp2, dout}), stream);
}

}  // namespace etr::cuda
