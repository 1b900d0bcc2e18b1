// matmul forward/backward on the GPU (matmul.h):
//   inp [N, C], weight [OC, C], bias [OC], out [N, OC]; dout [N, OC], dinp [N, C],
//   dweight [OC, C], dbias [OC].
//
// cuBLAS is column-major; a row-major matrix X [R, K] is, read column-major, X^T [K, R]
// with leading dimension K. So every row-major product Y = P . Q is computed as the
// column-major Y^T = Q^T . P^T, with the operands swapped:
//   out^T   [OC, N] = weight [OC, C]  . inp^T  [C, N]    (weight stored as weight^T: op T)
//   dinp^T  [C, N]  = weight^T [C, OC] . dout^T [OC, N]   (both as stored: op N, op N)
//   dweight^T [C, OC] = inp^T [C, N] . dout [N, OC]       (inp as stored, dout^T stored: op T)
// The bias is broadcast into out first and the product added with beta = 1, as the CPU
// kernel does; the gradients accumulate with beta = 1.
#include <algorithm>
#include <climits>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/cublas.h"
#include "runtime/kernels/cuda/matmul.h"

namespace etr::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;

// The column sum of dbias: a block owns kBiasCols adjacent columns (one warp reads 128
// contiguous bytes of a row) and splits the rows over kBiasLanes lanes, lane y summing
// rows y, y + kBiasLanes, ... in order; the lanes' partials are then added in lane order
// by one thread per column. No atomics, so the bits do not depend on scheduling.
constexpr int kBiasCols = 32;
constexpr int kBiasLanes = 32;

void check_sizes(int64_t N, int64_t C, int64_t OC, const char* what) {
  for (int64_t v : {N, C, OC}) {
    if (v < 0 || v > INT_MAX) {
      throw InvalidArgument(std::string(what) + " got sizes N " + std::to_string(N) + ", C " +
                            std::to_string(C) + ", OC " + std::to_string(OC) +
                            "; each must be in [0, 2^31) (cuBLAS takes 32-bit sizes)");
    }
  }
}

// out [N, OC]: every row set to bias [OC]. Blocks step over rows, threads over columns.
__global__ void broadcast_bias_kernel(float* __restrict__ out, const float* __restrict__ bias,
                                      int64_t N, int64_t OC) {
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    float* o = out + row * OC;
    for (int64_t col = threadIdx.x; col < OC; col += blockDim.x) o[col] = bias[col];
  }
}

// dbias [OC] += sum over the N rows of dout [N, OC]; block (kBiasCols, kBiasLanes).
__global__ void column_sum_kernel(float* __restrict__ dbias, const float* __restrict__ dout,
                                  int64_t N, int64_t OC) {
  __shared__ float partial[kBiasLanes][kBiasCols];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kBiasCols + threadIdx.x;
  float sum = 0.0f;
  if (col < OC) {
    for (int64_t row = threadIdx.y; row < N; row += kBiasLanes) sum += dout[row * OC + col];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < OC) {
    float total = partial[0][threadIdx.x];
    for (int lane = 1; lane < kBiasLanes; ++lane) total += partial[lane][threadIdx.x];
    dbias[col] += total;
  }
}

// Column-major C [m, n] = alpha op(A) op(B) + beta C, sizes already checked to fit int.
void sgemm(cudaStream_t stream, cublasOperation_t op_a, cublasOperation_t op_b, int64_t m,
           int64_t n, int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb,
           float beta, float* Cm, int64_t ldc) {
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasSgemm(cublas_handle(stream), op_a, op_b, static_cast<int>(m),
                           static_cast<int>(n), static_cast<int>(k), &alpha, A,
                           static_cast<int>(lda), B, static_cast<int>(ldb), &beta, Cm,
                           static_cast<int>(ldc)));
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int64_t C, int64_t OC, cudaStream_t stream) {
  check_sizes(N, C, OC, "matmul_forward");
  if (N == 0 || OC == 0) return;
  if (bias != nullptr) {
    const int blocks = static_cast<int>(std::min<int64_t>(N, kMaxBlocks));
    const int threads = static_cast<int>(std::min<int64_t>(OC, kThreads));
    broadcast_bias_kernel<<<blocks, threads, 0, stream>>>(out, bias, N, OC);
    CUDA_CHECK(cudaGetLastError());
  }
  if (C == 0) {
    // An empty product: out is the bias, or zero (cuBLAS is not asked about k = 0).
    if (bias == nullptr) {
      CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<size_t>(N * OC) * sizeof(float), stream));
    }
    return;
  }
  // out^T [OC, N] = op_T(weight^T [C, OC]) . inp^T [C, N]; beta 0 ignores out's contents.
  sgemm(stream, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C,
        bias != nullptr ? 1.0f : 0.0f, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t C, int64_t OC, cudaStream_t stream) {
  check_sizes(N, C, OC, "matmul_backward");
  if (N == 0) return;
  // An empty sum (OC == 0 for dinp) adds nothing, an empty matrix (C == 0) holds nothing.
  if (dinp != nullptr && C > 0 && OC > 0) {
    // dinp^T [C, N] += weight^T [C, OC] . dout^T [OC, N]
    sgemm(stream, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, 1.0f, dinp, C);
  }
  if (dweight != nullptr && C > 0 && OC > 0) {
    // dweight^T [C, OC] += inp^T [C, N] . op_T(dout^T [OC, N])
    sgemm(stream, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, 1.0f, dweight, C);
  }
  if (dbias != nullptr && OC > 0) {
    const dim3 block(kBiasCols, kBiasLanes);
    const unsigned grid = static_cast<unsigned>((OC + kBiasCols - 1) / kBiasCols);
    column_sum_kernel<<<grid, block, 0, stream>>>(dbias, dout, N, OC);
    CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace etr::cuda
