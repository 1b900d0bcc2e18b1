// cuBLASLt for the CUDA bf16 kernel set (matmul_bf16.cu, fused_bf16.cu): one handle per
// (thread, device), one workspace per (device, stream), and the products themselves with
// their plans cached.
//
//   cublasLtHandle_t h = cuda::cublaslt_handle();             // current device, this thread
//   cuda::LtWorkspace ws = cuda::cublaslt_workspace(stream);   // {ptr, kLtWorkspaceBytes}
//   cuda::LtProduct p{.trans_a = true, .a = {CUDA_R_16BF, C, OC, C}, ...};
//   if (!cuda::cublaslt_matmul(stream, p, A, B, D)) { /* no algorithm: fall back */ }
//
// The workspace is kLtWorkspaceBytes (32 MiB, NVIDIA's recommendation for Hopper, the
// figure the memory model already sets aside for cuBLAS: parallel/session_device.cc),
// cudaMalloc'd on a stream's first use on a device and kept for the process's life,
// outside the caching allocator, like the fp32 set's cuBLAS workspaces. One a stream,
// because work enqueued on one stream runs in order and so can share it, while work on
// two streams may run at once. Besides the products, the set's column-sum kernels
// (matmul_bf16.cu's dbias, layernorm_bf16.cu's dweight and dbias) keep their per-chunk
// partial sums in it between their two launches: enqueued on the same stream, they never
// overlap a product. A 32 MiB allocation on a stream's first use is the one allocation
// behind the kernels (kernels.h: none per call).
//
// cublaslt_matmul: D = op(A) . op(B) + beta D (C is D, in place), fp32 compute and fp32
// alpha (1) and beta, with an optional epilogue (BIAS: a bias vector of d.rows added to
// every column; GELU_AUX_BIAS: also the GELU, with the pre-GELU sum stored in aux).
// Returns false, with nothing enqueued, when cuBLASLt's heuristic offers no algorithm
// (or reports the combination NOT_SUPPORTED). The plan of a product (its descriptors and
// the heuristic's first algorithm) is cached, keyed by everything the heuristic sees: the
// device, the transposes, each matrix's type, rows, columns and leading dimension, the
// epilogue and its bias type and aux leading dimension, beta, the workspace size and the
// alignment (largest power of two up to 256) of every pointer. The algorithm is chosen
// once a key for the whole process (a mutex-guarded map), so every thread uses the same
// one, the one an uncached call would get; the descriptors are kept a thread (the
// epilogue's pointers are set on them each call). Enqueued on `stream`, returns at once.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace etr::cuda {

constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

struct LtWorkspace {
  void* ptr;
  size_t bytes;
};

cublasLtHandle_t cublaslt_handle();

LtWorkspace cublaslt_workspace(cudaStream_t stream);

// A matrix as stored (column-major): its element type, rows, columns, leading dimension.
struct LtMatrix {
  cudaDataType_t type;
  int64_t rows, cols, ld;
};

// One product's shapes and epilogue; the operands' pointers are passed beside it.
struct LtProduct {
  bool trans_a = false, trans_b = false;
  LtMatrix a{}, b{}, d{};  // d is also C (read when beta != 0)
  float beta = 0.0f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // BIAS epilogues: [d.rows] of bias_type
  cudaDataType_t bias_type = CUDA_R_16BF;
  void* aux = nullptr;  // AUX epilogues: [d.rows, d.cols] of d's type, leading dimension aux_ld
  int64_t aux_ld = 0;
};

bool cublaslt_matmul(cudaStream_t stream, const LtProduct& p, const void* A, const void* B,
                     void* D);

}  // namespace etr::cuda
