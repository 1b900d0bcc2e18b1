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

constexpr int kBiasCols = 32;   // dbias: columns a block
constexpr int kBiasLanes = 32;  // dbias: row-strided partial sums a column
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

// dbias [OC] += column sums of dout [N, OC]; block (kBiasCols, kBiasLanes): lane y sums
// rows y, y + kBiasLanes, ... in order, then thread (x, 0) adds the lanes in lane order.
__global__ void column_sum_kernel(float* __restrict__ dbias, const __nv_bfloat16* __restrict__ dout,
                                  int64_t N, int64_t OC) {
  __shared__ float partial[kBiasLanes][kBiasCols];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kBiasCols + threadIdx.x;
  float sum = 0.0f;
  if (col < OC) {
    for (int64_t row = threadIdx.y; row < N; row += kBiasLanes) {
      sum += detail::to_f32(dout[row * OC + col]);
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < OC) {
    float total = partial[0][threadIdx.x];
    for (int lane = 1; lane < kBiasLanes; ++lane) total += partial[lane][threadIdx.x];
    dbias[col] += total;
  }
}

// The largest power of two dividing the address, at most 256 (cuBLASLt's default
// assumption, which a pointer into a flat buffer need not meet).
uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// A matrix as stored (column-major): its element type, rows, columns, leading dimension.
struct Operand {
  const void* ptr;
  cudaDataType_t type;
  int64_t rows, cols, ld;
};

// Destroys the descriptors of one call, also when a check throws.
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtCall() {
    if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
    if (d) (void)cublasLtMatrixLayoutDestroy(d);
    if (b) (void)cublasLtMatrixLayoutDestroy(b);
    if (a) (void)cublasLtMatrixLayoutDestroy(a);
    if (op) (void)cublasLtMatmulDescDestroy(op);
  }
};

cublasLtMatrixLayout_t layout(const Operand& x) {
  cublasLtMatrixLayout_t l = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, x.type, static_cast<uint64_t>(x.rows),
                                          static_cast<uint64_t>(x.cols), x.ld));
  return l;
}

template <typename T>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, T v) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v)));
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, T v) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attr, &v, sizeof(v)));
}

// D = op(A) . op(B) + beta D (+ bias per row of D), fp32 compute; D is C (in place).
// False, with nothing enqueued, when cuBLASLt's heuristic offers no algorithm.
bool lt_matmul(cudaStream_t stream, bool trans_a, bool trans_b, const Operand& A, const Operand& B,
               const Operand& D, float beta, const __nv_bfloat16* bias) {
  LtCall call;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&call.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(call.op, CUBLASLT_MATMUL_DESC_TRANSA, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(call.op, CUBLASLT_MATMUL_DESC_TRANSB, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  if (bias != nullptr) {
    set_desc(call.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_desc(call.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias));
    set_desc(call.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_16BF));
  }
  call.a = layout(A);
  call.b = layout(B);
  call.d = layout(D);
  const LtWorkspace ws = cublaslt_workspace(stream);
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&call.pref));
  set_pref(call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(ws.bytes));
  set_pref(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(A.ptr));
  set_pref(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(B.ptr));
  set_pref(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(D.ptr));
  set_pref(call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(D.ptr));
  cublasLtHandle_t handle = cublaslt_handle();
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  // NOT_SUPPORTED (a type combination or layout it lacks) falls back as found == 0 does.
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle, call.op, call.a, call.b, call.d, call.d, call.pref, 1, &heuristic, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  CUBLAS_CHECK(status);
  if (found == 0) return false;
  const float alpha = 1.0f;
  void* d = const_cast<void*>(D.ptr);
  CUBLAS_CHECK(cublasLtMatmul(handle, call.op, &alpha, A.ptr, call.a, B.ptr, call.b, &beta, d,
                              call.d, d, call.d, &heuristic.algo, ws.ptr, ws.bytes, stream));
  return true;
}

// The product without epilogue: cuBLASLt, or cublasGemmEx (the same types, fp32 compute)
// for a shape or alignment cuBLASLt's heuristic has no algorithm for.
void product(cudaStream_t stream, bool trans_a, bool trans_b, const Operand& A, const Operand& B,
             const Operand& D, float beta) {
  if (lt_matmul(stream, trans_a, trans_b, A, B, D, beta, nullptr)) return;
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
  if (bias != nullptr && C > 0 && detail::aligned16({bias}) &&
      lt_matmul(stream, true, false, w_op, inp_op, out_op, 0.0f, nv(bias))) {
    return;
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
    const dim3 block(kBiasCols, kBiasLanes);
    const unsigned grid = static_cast<unsigned>((OC + kBiasCols - 1) / kBiasCols);
    column_sum_kernel<<<grid, block, 0, stream>>>(dbias, nv(dout), N, OC);
    CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace etr::cuda
