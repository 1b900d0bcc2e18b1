// bf16 attention (attention_bf16.h): qkv [B, T, 3C], att [B, NH, T, T], out [B, T, C];
// dout [B, T, C], dqkv [B, T, 3C], scratch [NH, T, T]; all bf16.
//
// cuBLAS is column-major: a row-major X [r, c] with row stride ld is the column-major
// X^T [c, r] with leading dimension ld, so a row-major C = A B is issued as C^T = B^T A^T.
// The products and their operands are the fp32 set's (runtime/kernels/cuda/attention.cu).
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/bf16/attention_bf16.h"
#include "runtime/kernels/cuda/bf16/bf16_vec.cuh"
#include "runtime/kernels/cuda/cublas.h"

namespace etr::cuda {
namespace {

using detail::nv;
using detail::to_bf16;
using detail::to_f32;
using detail::warp_max;
using detail::warp_sum;

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;
constexpr int kThreads = kWarp * kRowsPerBlock;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

int blocks_for_rows(int64_t rows) {
  return static_cast<int>(
      std::min<int64_t>((rows + kRowsPerBlock - 1) / kRowsPerBlock, kMaxBlocks));
}

// Row r of att (query t = r % T): scores in, probabilities out (s <= t), 0 above. Three
// passes over the bf16 scores (max; sum of exp; write), so nothing intermediate is
// rounded to bf16. Warp-uniform loop: full-mask shuffles are safe.
__global__ void causal_softmax_kernel(__nv_bfloat16* __restrict__ att, int64_t rows, int64_t T) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; r < rows;
       r += warps) {
    const int64_t t = r % T;
    __nv_bfloat16* row = att + r * T;
    float m = -INFINITY;
    for (int64_t s = lane; s <= t; s += kWarp) m = fmaxf(m, to_f32(row[s]));
    m = warp_max(m);
    float sum = 0.0f;
    for (int64_t s = lane; s <= t; s += kWarp) sum += expf(to_f32(row[s]) - m);
    const float inv = 1.0f / warp_sum(sum);
    for (int64_t s = lane; s <= t; s += kWarp) row[s] = to_bf16(expf(to_f32(row[s]) - m) * inv);
    for (int64_t s = t + 1 + lane; s < T; s += kWarp) row[s] = to_bf16(0.0f);
  }
}

// dP -> dS = att (dP - sum_s att dP) in place (fp32 math), 0 above the diagonal.
__global__ void causal_softmax_backward_kernel(__nv_bfloat16* __restrict__ dp,
                                               const __nv_bfloat16* __restrict__ att, int64_t rows,
                                               int64_t T) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; r < rows;
       r += warps) {
    const int64_t t = r % T;
    __nv_bfloat16* d = dp + r * T;
    const __nv_bfloat16* p = att + r * T;
    float dot = 0.0f;
    for (int64_t s = lane; s <= t; s += kWarp) dot += to_f32(p[s]) * to_f32(d[s]);
    dot = warp_sum(dot);
    for (int64_t s = lane; s <= t; s += kWarp) {
      d[s] = to_bf16(to_f32(p[s]) * (to_f32(d[s]) - dot));
    }
    for (int64_t s = t + 1 + lane; s < T; s += kWarp) d[s] = to_bf16(0.0f);
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

// C_i = alpha op(A_i) op(B_i) + beta C_i for the heads i, bf16 operands, fp32 compute.
// With beta == 0, C is not read.
void gemm_heads(cublasHandle_t handle, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                float alpha, const __nv_bfloat16* A, int64_t lda, int64_t sA,
                const __nv_bfloat16* B, int64_t ldb, int64_t sB, float beta, __nv_bfloat16* C,
                int64_t ldc, int64_t sC, int64_t heads) {
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &alpha, A, CUDA_R_16BF,
      static_cast<int>(lda), sA, B, CUDA_R_16BF, static_cast<int>(ldb), sB, &beta, C, CUDA_R_16BF,
      static_cast<int>(ldc), sC, static_cast<int>(heads), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

int64_t attention_backward_scratch_size_bf16(int64_t B, int64_t T, int64_t C, int64_t NH) {
  check_sizes("attention_backward_scratch_size (bf16)", B, T, C, NH);
  return B == 0 ? 0 : NH * T * T;
}

void attention_forward(bf16* out_, bf16* att_, const bf16* qkv_, int64_t B, int64_t T, int64_t C,
                       int64_t NH, cudaStream_t stream) {
  check_sizes("attention_forward (bf16)", B, T, C, NH);
  if (B == 0 || T == 0) return;
  __nv_bfloat16* out = nv(out_);
  __nv_bfloat16* att = nv(att_);
  const __nv_bfloat16* qkv = nv(qkv_);
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  cublasHandle_t handle = cublas_handle(stream);
  for (int64_t b = 0; b < B; ++b) {  // S = scale Q K^T, as S^T = scale K Q^T
    const __nv_bfloat16* q = qkv + b * T * 3 * C;
    gemm_heads(handle, true, false, T, T, hs, scale, q + C, 3 * C, hs, q, 3 * C, hs, 0.0f,
               att + b * NH * T * T, T, T * T, NH);
  }
  const int64_t rows = B * NH * T;
  causal_softmax_kernel<<<blocks_for_rows(rows), kThreads, 0, stream>>>(att, rows, T);
  CUDA_CHECK(cudaGetLastError());
  for (int64_t b = 0; b < B; ++b) {  // out = att V, as out^T = V^T att^T
    const __nv_bfloat16* v = qkv + b * T * 3 * C + 2 * C;
    gemm_heads(handle, false, false, hs, T, T, 1.0f, v, 3 * C, hs, att + b * NH * T * T, T, T * T,
               0.0f, out + b * T * C, C, hs, NH);
  }
}

void attention_backward(bf16* dqkv_, bf16* scratch, int64_t scratch_size, const bf16* dout_,
                        const bf16* qkv_, const bf16* att_, int64_t B, int64_t T, int64_t C,
                        int64_t NH, cudaStream_t stream) {
  check_sizes("attention_backward (bf16)", B, T, C, NH);
  if (B == 0 || T == 0) return;
  const int64_t need = attention_backward_scratch_size_bf16(B, T, C, NH);
  if (scratch == nullptr || scratch_size < need) {
    throw InvalidArgument("attention_backward (bf16) needs at least " + std::to_string(need) +
                          " elements of scratch (NH T^2) for T = " + std::to_string(T) +
                          " and NH = " + std::to_string(NH) + ", got " +
                          std::to_string(scratch == nullptr ? 0 : scratch_size));
  }
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  cublasHandle_t handle = cublas_handle(stream);
  __nv_bfloat16* dp = nv(scratch);  // [NH, T, T]: dP, then dS, of sequence b
  for (int64_t b = 0; b < B; ++b) {
    const __nv_bfloat16* q = nv(qkv_) + b * T * 3 * C;
    const __nv_bfloat16* k = q + C;
    const __nv_bfloat16* v = q + 2 * C;
    __nv_bfloat16* dq = nv(dqkv_) + b * T * 3 * C;
    __nv_bfloat16* dk = dq + C;
    __nv_bfloat16* dv = dq + 2 * C;
    const __nv_bfloat16* d = nv(dout_) + b * T * C;
    const __nv_bfloat16* a = nv(att_) + b * NH * T * T;
    // dP = dO V^T (as dP^T = V dO^T); dV += att^T dO (as dV^T += dO^T att).
    gemm_heads(handle, true, false, T, T, hs, 1.0f, v, 3 * C, hs, d, C, hs, 0.0f, dp, T, T * T, NH);
    gemm_heads(handle, false, true, hs, T, T, 1.0f, d, C, hs, a, T, T * T, 1.0f, dv, 3 * C, hs, NH);
    const int64_t rows = NH * T;
    causal_softmax_backward_kernel<<<blocks_for_rows(rows), kThreads, 0, stream>>>(dp, a, rows, T);
    CUDA_CHECK(cudaGetLastError());
    // dQ += scale dS K (as dQ^T += scale K^T dS^T); dK += scale dS^T Q (as dK^T += Q^T dS).
    gemm_heads(handle, false, false, hs, T, T, scale, k, 3 * C, hs, dp, T, T * T, 1.0f, dq, 3 * C,
               hs, NH);
    gemm_heads(handle, false, true, hs, T, T, scale, q, 3 * C, hs, dp, T, T * T, 1.0f, dk, 3 * C,
               hs, NH);
  }
}

}  // namespace etr::cuda
