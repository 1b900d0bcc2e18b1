// CHECK macros for the CUDA runtime, cuBLAS and NCCL (CONTRIBUTING.md, style 3).
//
//   CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
//     throws etr::Error "cudaMemcpyAsync(...) failed: cudaErrorInvalidValue: invalid
//     argument at runtime/cuda_allocator.cc:88"
//   CUBLAS_CHECK(cublasSgemm(...));   // etr::Error with cublasGetStatusName/String
//   NCCL_CHECK(ncclAllReduce(...));   // etr::CommError with the result name, its string
//                                     // and NCCL's last detailed error message
//
// Only CUDA translation units include this header (it pulls in the CUDA, cuBLAS and NCCL
// headers); code built without CUDA never sees it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

namespace etr {

// Visible CUDA devices; 0 (never an exception) when there is no driver or no GPU, so
// tests and device binding can ask before touching CUDA.
int cuda_device_count();

}  // namespace etr

namespace etr::detail {

[[noreturn]] void cuda_failed(const char* call, cudaError_t code, const char* file, int line);
[[noreturn]] void cublas_failed(const char* call, cublasStatus_t code, const char* file, int line);
[[noreturn]] void nccl_failed(const char* call, ncclResult_t code, const char* file, int line);

// "ncclUnhandledCudaError: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"
const char* nccl_result_name(ncclResult_t code);

}  // namespace etr::detail

#define CUDA_CHECK(call)                                                   \
  do {                                                                     \
    cudaError_t etr_cuda_rc_ = (call);                                     \
    if (__builtin_expect(etr_cuda_rc_ != cudaSuccess, 0))                  \
      ::etr::detail::cuda_failed(#call, etr_cuda_rc_, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                     \
  do {                                                                         \
    cublasStatus_t etr_cublas_rc_ = (call);                                    \
    if (__builtin_expect(etr_cublas_rc_ != CUBLAS_STATUS_SUCCESS, 0))          \
      ::etr::detail::cublas_failed(#call, etr_cublas_rc_, __FILE__, __LINE__); \
  } while (0)

#define NCCL_CHECK(call)                                                   \
  do {                                                                     \
    ncclResult_t etr_nccl_rc_ = (call);                                    \
    if (__builtin_expect(etr_nccl_rc_ != ncclSuccess, 0))                  \
      ::etr::detail::nccl_failed(#call, etr_nccl_rc_, __FILE__, __LINE__); \
  } while (0)
