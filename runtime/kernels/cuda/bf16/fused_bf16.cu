// Fused bf16 forwards (fused_bf16.h): residual + layernorm, inp1, inp2, x1, y [N, C],
// weight, bias [C], mean, rstd [N] (fp32); matmul + GELU, inp [N, C], weight [OC, C],
// bias [OC], pre, out [N, OC].
//
// The residual-layernorm kernel is templated on W, the values a lane handles at once: 8
// (one 16-byte access) or 1. Lane l owns elements [l W, l W + W), then 32 W further, ...
// of its row, as in layernorm_bf16.cu, so the sums are formed in the same order as there.
// A block holds kRowsPerBlock warps (fewer for wide rows) and one bf16 row of shared
// memory a warp; a lane reads back only the elements it wrote itself, so the row buffer
// needs no barrier.
//
// The matmul is issued as in matmul_bf16.cu (column-major, operands swapped):
//   out^T [OC, N] = gelu(op_T(weight^T as stored [C, OC]) . inp^T [C, N] + bias)
// with pre^T [OC, N] (leading dimension OC) as the epilogue's AUX matrix, through
// cublaslt.h's cublaslt_matmul (the plan cached by shape, alignments and epilogue).
#include <algorithm>
#include <climits>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/bf16/bf16_vec.cuh"
#include "runtime/kernels/cuda/bf16/cublaslt.h"
#include "runtime/kernels/cuda/bf16/fused_bf16.h"
#include "runtime/kernels/cuda/bf16/layernorm_bf16.h"
#include "runtime/kernels/cuda/bf16/matmul_bf16.h"
#include "runtime/kernels/cuda/bf16/pointwise_bf16.h"

namespace etr::cuda {
namespace {

using detail::nv;
using detail::warp_sum;

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;
constexpr int64_t kMaxRowBlocks = 65536;
// Shared memory a block may use without opting in: 48 KiB, one bf16 row a warp.
constexpr int64_t kRowBytesBudget = 48 * 1024;

// ---- residual + layernorm ----

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

// No __restrict__ on x1, inp1, inp2: x1 may be either input. A lane reads its elements
// of inp1 and inp2 before it writes the same elements of x1, and no lane reads another's.
template <int W>
__global__ void residual_layernorm_kernel(__nv_bfloat16* x1, __nv_bfloat16* __restrict__ y,
                                          float* __restrict__ mean, float* __restrict__ rstd,
                                          const __nv_bfloat16* inp1, const __nv_bfloat16* inp2,
                                          const __nv_bfloat16* __restrict__ weight,
                                          const __nv_bfloat16* __restrict__ bias, int64_t N,
                                          int64_t C, float eps) {
  extern __shared__ int4 shared_rows[];  // int4: 16-byte aligned for the W 8 accesses
  const int rows_per_block = static_cast<int>(blockDim.x) / kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  __nv_bfloat16* row = reinterpret_cast<__nv_bfloat16*>(shared_rows) + warp * C;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * rows_per_block;
  const float inv_c = 1.0f / static_cast<float>(C);
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * rows_per_block + warp; n < N; n += warps) {
    const int64_t offset = n * C;
    float v[W], b[W];
    float sum = 0.0f;
    for (int64_t i = lane * W; i < C; i += kWarp * W) {
      load_w<W>(inp1 + offset + i, v);
      load_w<W>(inp2 + offset + i, b);
      // x1 rounded to bf16 here, so the statistics see what layernorm_forward would read.
      for (int k = 0; k < W; ++k) v[k] = detail::to_f32(detail::to_bf16(v[k] + b[k]));
      store_w<W>(x1 + offset + i, v);  // exact: v holds bf16 values
      store_w<W>(row + i, v);
      for (int k = 0; k < W; ++k) sum += v[k];
    }
    const float m = warp_sum(sum) * inv_c;
    float sq = 0.0f;
    for (int64_t i = lane * W; i < C; i += kWarp * W) {
      load_w<W>(row + i, v);
      for (int k = 0; k < W; ++k) sq += (v[k] - m) * (v[k] - m);
    }
    const float s = 1.0f / sqrtf(warp_sum(sq) * inv_c + eps);
    float w[W];
    for (int64_t i = lane * W; i < C; i += kWarp * W) {
      load_w<W>(row + i, v);
      load_w<W>(weight + i, w);
      load_w<W>(bias + i, b);
      for (int k = 0; k < W; ++k) v[k] = (v[k] - m) * s * w[k] + b[k];
      store_w<W>(y + offset + i, v);
    }
    if (lane == 0) {
      if (mean != nullptr) mean[n] = m;
      if (rstd != nullptr) rstd[n] = s;
    }
  }
}

// ---- matmul + GELU through cuBLASLt ----

void check_matmul_sizes(int64_t N, int64_t C, int64_t OC) {
  for (int64_t v : {N, C, OC}) {
    if (v < 0 || v > INT_MAX) {
      throw InvalidArgument("matmul_gelu_forward (bf16) got sizes N " + std::to_string(N) + ", C " +
                            std::to_string(C) + ", OC " + std::to_string(OC) +
                            "; each must be in [0, 2^31) (cuBLASLt takes 32-bit sizes)");
    }
  }
}

// out^T = gelu(weight . inp^T + bias), pre^T = the GELU's input, one cublasLtMatmul.
// False, with nothing enqueued, when cuBLASLt's heuristic offers no algorithm.
bool lt_matmul_gelu(cudaStream_t stream, bf16* pre, bf16* out, const bf16* inp, const bf16* weight,
                    const bf16* bias, int64_t N, int64_t C, int64_t OC) {
  LtProduct p;
  p.trans_a = true;  // weight^T as stored [C, OC], transposed
  p.a = {CUDA_R_16BF, C, OC, C};
  p.b = {CUDA_R_16BF, C, N, C};    // inp^T
  p.d = {CUDA_R_16BF, OC, N, OC};  // out^T (also C, with beta 0)
  p.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  p.bias = bias;
  p.bias_type = CUDA_R_16BF;
  // AUX (pre^T) has D's type (bf16, the default) and D's shape [OC, N]; its leading
  // dimension must be a multiple of 8 and at least D's rows (the caller checks OC % 8).
  p.aux = pre;
  p.aux_ld = OC;
  return cublaslt_matmul(stream, p, weight, inp, out);
}

// True when [a, a + n) and [b, b + n) share an element.
bool overlap(const bf16* a, const bf16* b, int64_t n) {
  const uintptr_t pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  const uintptr_t bytes = static_cast<uintptr_t>(n) * sizeof(bf16);
  return pa < pb + bytes && pb < pa + bytes;
}

}  // namespace

void residual_layernorm_forward(bf16* x1, bf16* y, float* mean, float* rstd, const bf16* inp1,
                                const bf16* inp2, const bf16* weight, const bf16* bias, int64_t N,
                                int64_t C, double eps, cudaStream_t stream) {
  if (N < 0 || C < 1) {
    throw InvalidArgument("residual_layernorm_forward (bf16) needs N >= 0 and C > 0, not N " +
                          std::to_string(N) + ", C " + std::to_string(C));
  }
  if (!(eps > 0)) {
    throw InvalidArgument("residual_layernorm_forward's eps must be positive, not " +
                          std::to_string(eps));
  }
  if (N == 0) return;
  const int64_t row_bytes = C * static_cast<int64_t>(sizeof(bf16));
  const int64_t rows = std::min<int64_t>(kRowsPerBlock, kRowBytesBudget / row_bytes);
  if (rows < 1) {  // a row wider than the shared memory budget: the composition
    residual_forward(x1, inp1, inp2, N * C, stream);
    layernorm_forward(y, mean, rstd, x1, weight, bias, N, C, eps, stream);
    return;
  }
  const bool vec = C % detail::kVec == 0 && detail::aligned16({x1, y, inp1, inp2, weight, bias});
  const int blocks = static_cast<int>(std::min<int64_t>((N + rows - 1) / rows, kMaxRowBlocks));
  const int threads = static_cast<int>(rows) * kWarp;
  const size_t shared = static_cast<size_t>(rows * row_bytes);
  const float e = static_cast<float>(eps);
  if (vec) {
    residual_layernorm_kernel<detail::kVec><<<blocks, threads, shared, stream>>>(
        nv(x1), nv(y), mean, rstd, nv(inp1), nv(inp2), nv(weight), nv(bias), N, C, e);
  } else {
    residual_layernorm_kernel<1><<<blocks, threads, shared, stream>>>(
        nv(x1), nv(y), mean, rstd, nv(inp1), nv(inp2), nv(weight), nv(bias), N, C, e);
  }
  CUDA_CHECK(cudaGetLastError());
}

void matmul_gelu_forward(bf16* pre, bf16* out, const bf16* inp, const bf16* weight,
                         const bf16* bias, int64_t N, int64_t C, int64_t OC, cudaStream_t stream) {
  check_matmul_sizes(N, C, OC);
  if (N == 0 || OC == 0) return;
  const bool epilogue = bias != nullptr && C > 0 && OC % 8 == 0 && detail::aligned16({bias, pre}) &&
                        !overlap(pre, out, N * OC);
  if (epilogue && lt_matmul_gelu(stream, pre, out, inp, weight, bias, N, C, OC)) return;
  matmul_forward(pre, inp, weight, bias, N, C, OC, stream);
  gelu_forward(out, pre, N * OC, stream);
}

}  // namespace etr::cuda
