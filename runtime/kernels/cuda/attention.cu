// attention forward/backward on the GPU (contract in attention.h):
//   qkv [B, T, 3C], att [B, NH, T, T], out [B, T, C];
//   dout [B, T, C], dqkv [B, T, 3C], scratch [NH, T, T].
//
// cuBLAS is column-major and our buffers are row-major: a row-major X [r, c] with row
// stride ld is the column-major X^T [c, r] with leading dimension ld. So a row-major
// product C = A B is issued as the column-major C^T = B^T A^T, the operands swapped.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/attention.h"
#include "runtime/kernels/cuda/cublas.h"

namespace etr::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // one warp per row
constexpr int kThreads = kWarp * kRowsPerBlock;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

int blocks_for_rows(int64_t rows) {
  return static_cast<int>(
      std::min<int64_t>((rows + kRowsPerBlock - 1) / kRowsPerBlock, kMaxBlocks));
}

// Butterfly reductions: partners add (or max) the same two values, and IEEE addition is
// commutative, so every lane ends with the same bits and the order never changes.
__device__ inline float warp_sum(float x) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  }
  return x;
}
__device__ inline float warp_max(float x) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}

// att holds `rows` rows of T scores, row r being query t = r % T (rows of [.., T, T]
// blocks). Each warp turns one row into the softmax over s <= t and zeroes s > t. The row
// index is the same on all lanes of a warp, so whole warps leave the loop together and
// the full-mask shuffles are safe.
__global__ void causal_softmax_kernel(float* __restrict__ att, int64_t rows, int64_t T) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t r = warp; r < rows; r += warps) {
    const int64_t t = r % T;
    float* row = att + r * T;
    float m = -INFINITY;
    for (int64_t s = lane; s <= t; s += kWarp) m = fmaxf(m, row[s]);
    m = warp_max(m);
    float sum = 0.0f;
    for (int64_t s = lane; s <= t; s += kWarp) {
      const float e = expf(row[s] - m);  // <= 1: the max is subtracted
      row[s] = e;
      sum += e;
    }
    const float inv = 1.0f / warp_sum(sum);  // >= 1: the max's own term is exp(0)
    for (int64_t s = lane; s <= t; s += kWarp) row[s] *= inv;
    for (int64_t s = t + 1 + lane; s < T; s += kWarp) row[s] = 0.0f;
  }
}

// dp and att hold `rows` matching rows of T entries, row r being query t = r % T. Each
// warp turns dP into dS = att * (dP - sum_s att * dP) in place, zero for s > t (att is 0
// there, and writing 0 keeps a non-finite dP above the diagonal out of the products).
__global__ void causal_softmax_backward_kernel(float* __restrict__ dp,
                                               const float* __restrict__ att, int64_t rows,
                                               int64_t T) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t r = warp; r < rows; r += warps) {
    const int64_t t = r % T;
    float* d = dp + r * T;
    const float* p = att + r * T;
    float dot = 0.0f;
    for (int64_t s = lane; s <= t; s += kWarp) dot += p[s] * d[s];
    dot = warp_sum(dot);
    for (int64_t s = lane; s <= t; s += kWarp) d[s] = p[s] * (d[s] - dot);
    for (int64_t s = t + 1 + lane; s < T; s += kWarp) d[s] = 0.0f;
  }
}

void check_sizes(const char* who, int64_t B, int64_t T, int64_t C, int64_t NH) {
  if (B < 0 || T < 0 || C <= 0 || NH <= 0) {
    throw InvalidArgument(std::string(who) + " needs B, T >= 0 and C, NH > 0 (B " +
                          std::to_string(B) + ", T " + std::to_string(T) + ", C " +
                          std::to_string(C) + ", NH " + std::to_string(NH) + ")");
  }
  if (C % NH != 0) {
    throw InvalidArgument(std::string(who) + ": the width C = " + std::to_string(C) +
                          " is not a multiple of the " + std::to_string(NH) + " heads");
  }
  if (3 * C > INT_MAX || T > INT_MAX || NH > INT_MAX) {
    throw InvalidArgument(std::string(who) + ": 3C = " + std::to_string(3 * C) +
                          ", T = " + std::to_string(T) + " or NH = " + std::to_string(NH) +
                          " does not fit cuBLAS's int");
  }
}

// One column-major product per head of a sequence: C_i = alpha op(A_i) op(B_i) + beta C_i
// for i in [0, heads), A_i = A + i sA and so on. With beta == 0, C is not read (cuBLAS's
// contract), so NaN poison in an assigned output does not leak in.
void gemm_heads(cublasHandle_t handle, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                float alpha, const float* A, int64_t lda, int64_t sA, const float* B, int64_t ldb,
                int64_t sB, float beta, float* C, int64_t ldc, int64_t sC, int64_t heads) {
  CUBLAS_CHECK(cublasSgemmStridedBatched(
      handle, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &alpha, A,
      static_cast<int>(lda), sA, B, static_cast<int>(ldb), sB, &beta, C, static_cast<int>(ldc), sC,
      static_cast<int>(heads)));
}

}  // namespace

int64_t attention_backward_scratch_size(int64_t B, int64_t T, int64_t C, int64_t NH) {
  check_sizes("attention_backward_scratch_size", B, T, C, NH);
  return B == 0 ? 0 : NH * T * T;
}

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, cudaStream_t stream) {
  check_sizes("attention_forward", B, T, C, NH);
  if (B == 0 || T == 0) return;
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  cublasHandle_t handle = cublas_handle(stream);
  // Per head, row-major Q, K, V [T, hs] (row stride 3C) and att [T, T]:
  // S = scale Q K^T, issued as column-major S^T = scale K Q^T.
  for (int64_t b = 0; b < B; ++b) {
    const float* q = qkv + b * T * 3 * C;
    const float* k = q + C;
    gemm_heads(handle, true, false, T, T, hs, scale, k, 3 * C, hs, q, 3 * C, hs, 0.0f,
               att + b * NH * T * T, T, T * T, NH);
  }
  const int64_t rows = B * NH * T;
  causal_softmax_kernel<<<blocks_for_rows(rows), kThreads, 0, stream>>>(att, rows, T);
  CUDA_CHECK(cudaGetLastError());
  // out [T, hs] (row stride C) = att V, issued as out^T = V^T att^T.
  for (int64_t b = 0; b < B; ++b) {
    const float* v = qkv + b * T * 3 * C + 2 * C;
    gemm_heads(handle, false, false, hs, T, T, 1.0f, v, 3 * C, hs, att + b * NH * T * T, T, T * T,
               0.0f, out + b * T * C, C, hs, NH);
  }
}

void attention_backward(float* dqkv, float* scratch, int64_t scratch_size, const float* dout,
                        const float* qkv, const float* att, int64_t B, int64_t T, int64_t C,
                        int64_t NH, cudaStream_t stream) {
  check_sizes("attention_backward", B, T, C, NH);
  if (B == 0 || T == 0) return;
  const int64_t need = attention_backward_scratch_size(B, T, C, NH);
  if (scratch == nullptr || scratch_size < need) {
    throw InvalidArgument("attention_backward needs at least " + std::to_string(need) +
                          " elements of scratch (NH T^2) for T = " + std::to_string(T) +
                          " and NH = " + std::to_string(NH) + ", got " +
                          std::to_string(scratch == nullptr ? 0 : scratch_size));
  }
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  cublasHandle_t handle = cublas_handle(stream);
  float* dp = scratch;  // [NH, T, T]: dP, then dS, of sequence b; reused in stream order
  for (int64_t b = 0; b < B; ++b) {
    const float* q = qkv + b * T * 3 * C;  // row-major [T, hs] per head, row stride 3C
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* dq = dqkv + b * T * 3 * C;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    const float* d = dout + b * T * C;      // [T, hs] per head, row stride C
    const float* a = att + b * NH * T * T;  // [T, T] per head
    // dP = dO V^T, issued as dP^T = V dO^T.
    gemm_heads(handle, true, false, T, T, hs, 1.0f, v, 3 * C, hs, d, C, hs, 0.0f, dp, T, T * T, NH);
    // dV += att^T dO, issued as dV^T += dO^T att.
    gemm_heads(handle, false, true, hs, T, T, 1.0f, d, C, hs, a, T, T * T, 1.0f, dv, 3 * C, hs, NH);
    const int64_t rows = NH * T;
    causal_softmax_backward_kernel<<<blocks_for_rows(rows), kThreads, 0, stream>>>(dp, a, rows, T);
    CUDA_CHECK(cudaGetLastError());
    // dQ += scale dS K, issued as dQ^T += scale K^T dS^T.
    gemm_heads(handle, false, false, hs, T, T, scale, k, 3 * C, hs, dp, T, T * T, 1.0f, dq, 3 * C,
               hs, NH);
    // dK += scale dS^T Q, issued as dK^T += scale Q^T dS.
    gemm_heads(handle, false, true, hs, T, T, scale, q, 3 * C, hs, dp, T, T * T, 1.0f, dk, 3 * C,
               hs, NH);
  }
}

}  // namespace etr::cuda
