// bf16 matmul (matmul_bf16.h): inp [N, C], weight [OC, C], bias [OC], out [N, OC];
// dout [N, OC], dinp [N, C], dweight [OC, C] fp32, dbias [OC] fp32.
//
// cuBLASLt is column-major: a row-major X [R, K] is the column-major X^T [K, R] with
// leading dimension K, so each row-major product is issued transposed, operands swapped:
//   out^T     [OC, N] = op_T(weight^T as stored [C, OC]) . inp^T [C, N]
//   dinp^T    [C, N]  = weight^T [C, OC] . dout^T [OC, N]
//   dweight^T [C, OC] = inp^T [C, N] . op_T(dout^T as stored [OC, N])
// The BIAS epilogue adds a vector of length m (= OC rows of out^T) to every column.
#include <algorithm>
#include <climits>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/bf16/bf16_vec.cuh"
#include "runtime/kernels/cuda/bf16/cublaslt.h"
#include "runtime/kernels/cuda/bf16/matmul_bf16.h"
#include "runtime/kernels/cuda/cublas.h"

namespace etr::cuda {
namespace {

using detail::nv;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;

void check_sizes(int64_t N, int64_t C, int64_t OC, const char* what) {
  for (int64_t v : {N, C, OC}) {
    if (v < 0 || v > INT_MAX) {
      throw InvalidArgument(std::string(what) + " got sizes N " + std::to_string(N) + ", C " +
                            std::to_string(C) + ", OC " + std::to_string(OC) +
                            "; each must be in [0, 2^31) (cuBLASLt takes 32-bit sizes)");
    }
  }
}

// out [N, OC]: every row set to bias [OC] (bf16 bits copied: exact).
__global__ void broadcast_bias_kernel(__nv_bfloat16* __restrict__ out,
                                      const __nv_bfloat16* __restrict__ bias, int64_t N,
                                      int64_t OC) {
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    __nv_bfloat16* o = out + row * OC;
    for (int64_t col = threadIdx.x; col < OC; col += blockDim.x) o[col] = bias[col];
  }
}

// ---- dbias [OC] += column sums of dout [N, OC]: two launches, no atomics ----
//
// Stage 1, grid (ceil(OC / 64) column tiles, S row chunks): the block of tile t and chunk
// s sums rows [s R, min(N, (s + 1) R)), R = ceil(N / S), of columns [64 t, 64 t + 64).
// Thread (group g = x % 8, lane l = x / 8) owns columns [64 t + 8 g, + 8) and sums rows
// first + l, first + l + 32, ... in that order (fp32), one 16-byte load a row when OC % 8
// == 0 and dout is 16-byte aligned, else 8 scalar loads; a warp reads 4 rows x 128
// contiguous bytes a step. The 32 lanes' sums go through shared memory and are added in
// lane order. With S == 1 the block adds its total into dbias; else it stores it as
// partials[s, col] (fp32 [S, OC] in the stream's cuBLASLt workspace), and stage 2, one
// thread a column, adds the S partials in chunk order and that total into dbias once.
// The order depends only on N and OC: vector and scalar loads give the same bits.

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

template <bool Vec>
__global__ void __launch_bounds__(kSumThreads)
    column_sum_chunk_kernel(float* __restrict__ dbias, float* __restrict__ partials,
                            const __nv_bfloat16* __restrict__ dout, int64_t N, int64_t OC,
                            int64_t chunk_rows) {
  __shared__ __align__(16) float lanes[kSumLanes][kSumCols];
  const int group = static_cast<int>(threadIdx.x) % kSumGroups;
  const int lane = static_cast<int>(threadIdx.x) / kSumGroups;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kSumCols;
  const int64_t col0 = tile0 + group * detail::kVec;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * chunk_rows;
  const int64_t end = first + chunk_rows < N ? first + chunk_rows : N;
  float sum[detail::kVec] = {};
  if (col0 < OC) {
    int64_t n = first + lane;
    for (; n + (kSumUnroll - 1) * kSumLanes < end; n += kSumUnroll * kSumLanes) {
      float v[kSumUnroll][detail::kVec];
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u)
        load_cols<Vec>(dout + (n + u * kSumLanes) * OC, col0, OC, v[u]);
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u) {
#pragma unroll
        for (int k = 0; k < detail::kVec; ++k) sum[k] += v[u][k];
      }
    }
    for (; n < end; n += kSumLanes) {
      float v[detail::kVec];
      load_cols<Vec>(dout + n * OC, col0, OC, v);
#pragma unroll
      for (int k = 0; k < detail::kVec; ++k) sum[k] += v[k];
    }
  }
  float4* mine = reinterpret_cast<float4*>(&lanes[lane][group * detail::kVec]);
  mine[0] = make_float4(sum[0], sum[1], sum[2], sum[3]);
  mine[1] = make_float4(sum[4], sum[5], sum[6], sum[7]);
  __syncthreads();
  const int64_t col = tile0 + threadIdx.x;
  if (threadIdx.x < kSumCols && col < OC) {
    float total = lanes[0][threadIdx.x];
    for (int l = 1; l < kSumLanes; ++l) total += lanes[l][threadIdx.x];
    if (gridDim.y == 1) {
      dbias[col] += total;
    } else {
      partials[blockIdx.y * OC + col] = total;
    }
  }
}

// dbias[c] += partials[0, c] + partials[1, c] + ... (chunk order), one thread a column.
__global__ void add_partials_kernel(float* __restrict__ dbias, const float* __restrict__ partials,
                                    int chunks, int64_t OC) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < OC;
       c += stride) {
    float total = partials[c];
    for (int s = 1; s < chunks; ++s) total += partials[s * OC + c];
    dbias[c] += total;
  }
}

// Row chunks for N rows: >= kMinChunkRows rows each, at most kMaxChunks, and no more than
// the workspace holds partials [chunks, OC] fp32 for.
int64_t row_chunks(int64_t N, int64_t OC) {
  const int64_t want = std::clamp<int64_t>(N / kMinChunkRows, 1, kMaxChunks);
  const int64_t fit =
      static_cast<int64_t>(kLtWorkspaceBytes / sizeof(float)) / std::max<int64_t>(OC, 1);
  return std::max<int64_t>(1, std::min(want, fit));
}

void column_sums(float* dbias, const __nv_bfloat16* dout, int64_t N, int64_t OC,
                 cudaStream_t stream) {
  const int64_t chunks = row_chunks(N, OC);
  const int64_t chunk_rows = (N + chunks - 1) / chunks;
  float* partials = nullptr;
  if (chunks > 1) {
    const LtWorkspace ws = cublaslt_workspace(stream);
    if (static_cast<size_t>(chunks * OC) * sizeof(float) > ws.bytes) {
      throw InvalidArgument("matmul_backward (bf16): dbias partials exceed the workspace");
    }
    partials = static_cast<float*>(ws.ptr);
  }
  const dim3 grid(static_cast<unsigned>((OC + kSumCols - 1) / kSumCols),
                  static_cast<unsigned>(chunks));
  if (OC % detail::kVec == 0 && detail::aligned16({dout})) {
    column_sum_chunk_kernel<true>
        <<<grid, kSumThreads, 0, stream>>>(dbias, partials, dout, N, OC, chunk_rows);
  } else {
    column_sum_chunk_kernel<false>
        <<<grid, kSumThreads, 0, stream>>>(dbias, partials, dout, N, OC, chunk_rows);
  }
  CUDA_CHECK(cudaGetLastError());
  if (chunks > 1) {
    const int blocks =
        static_cast<int>(std::min<int64_t>((OC + kThreads - 1) / kThreads, kMaxBlocks));
    add_partials_kernel<<<blocks, kThreads, 0, stream>>>(dbias, partials, static_cast<int>(chunks),
                                                         OC);
    CUDA_CHECK(cudaGetLastError());
  }
}

// A matrix as stored (column-major) and where it is.
struct Operand {
  const void* ptr;
  cudaDataType_t type;
  int64_t rows, cols, ld;
  LtMatrix matrix() const { return {type, rows, cols, ld}; }
};

// The product without epilogue: cuBLASLt, or cublasGemmEx (the same types, fp32 compute)
// for a shape or alignment cuBLASLt's heuristic has no algorithm for.
void product(cudaStream_t stream, bool trans_a, bool trans_b, const Operand& A, const Operand& B,
             const Operand& D, float beta) {
  LtProduct p;
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.a = A.matrix();
  p.b = B.matrix();
  p.d = D.matrix();
  p.beta = beta;
  if (cublaslt_matmul(stream, p, A.ptr, B.ptr, const_cast<void*>(D.ptr))) return;
  const float alpha = 1.0f;
  const int64_t k = trans_a ? A.rows : A.cols;
  CUBLAS_CHECK(cublasGemmEx(cublas_handle(stream), trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                            trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(D.rows),
                            static_cast<int>(D.cols), static_cast<int>(k), &alpha, A.ptr, A.type,
                            static_cast<int>(A.ld), B.ptr, B.type, static_cast<int>(B.ld), &beta,
                            const_cast<void*>(D.ptr), D.type, static_cast<int>(D.ld),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int64_t N,
                    int64_t C, int64_t OC, cudaStream_t stream) {
  check_sizes(N, C, OC, "matmul_forward (bf16)");
  if (N == 0 || OC == 0) return;
  const Operand w_op{weight, CUDA_R_16BF, C, OC, C}, inp_op{inp, CUDA_R_16BF, C, N, C};
  const Operand out_op{out, CUDA_R_16BF, OC, N, OC};
  // The BIAS epilogue when the bias is 16-byte aligned and cuBLASLt has an algorithm for it.
  if (bias != nullptr && C > 0 && detail::aligned16({bias})) {
    LtProduct p;
    p.trans_a = true;
    p.a = w_op.matrix();
    p.b = inp_op.matrix();
    p.d = out_op.matrix();
    p.epilogue = CUBLASLT_EPILOGUE_BIAS;
    p.bias = bias;
    if (cublaslt_matmul(stream, p, weight, inp, out)) return;
  }
  if (bias != nullptr) {  // else the bias broadcast into out, the product added (beta 1)
    const int blocks = static_cast<int>(std::min<int64_t>(N, kMaxBlocks));
    const int threads = static_cast<int>(std::min<int64_t>(OC, kThreads));
    broadcast_bias_kernel<<<blocks, threads, 0, stream>>>(nv(out), nv(bias), N, OC);
    CUDA_CHECK(cudaGetLastError());
  }
  if (C == 0) {
    if (bias == nullptr) {
      CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<size_t>(N * OC) * sizeof(bf16), stream));
    }
    return;
  }
  product(stream, true, false, w_op, inp_op, out_op, bias != nullptr ? 1.0f : 0.0f);
}

void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                     const bf16* weight, int64_t N, int64_t C, int64_t OC, cudaStream_t stream) {
  check_sizes(N, C, OC, "matmul_backward (bf16)");
  if (N == 0) return;
  if (dinp != nullptr && C > 0 && OC > 0) {
    product(stream, false, false, {weight, CUDA_R_16BF, C, OC, C}, {dout, CUDA_R_16BF, OC, N, OC},
            {dinp, CUDA_R_16BF, C, N, C}, 1.0f);
  }
  if (dweight != nullptr && C > 0 && OC > 0) {
    product(stream, false, true, {inp, CUDA_R_16BF, C, N, C}, {dout, CUDA_R_16BF, OC, N, OC},
            {dweight, CUDA_R_32F, C, OC, C}, 1.0f);
  }
  if (dbias != nullptr && OC > 0) {
    column_sums(dbias, nv(dout), N, OC, stream);
  }
}

}  // namespace etr::cuda
