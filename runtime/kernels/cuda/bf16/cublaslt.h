// cuBLASLt for the CUDA bf16 kernel set (matmul_bf16.cu): one handle per (thread,
// device) and one workspace per (device, stream).
//
//   cublasLtHandle_t h = cuda::cublaslt_handle();             // current device, this thread
//   cuda::LtWorkspace ws = cuda::cublaslt_workspace(stream);   // {ptr, kLtWorkspaceBytes}
//
// The workspace is kLtWorkspaceBytes (32 MiB, NVIDIA's recommendation for Hopper, the
// figure the memory model already sets aside for cuBLAS: parallel/session_device.cc),
// cudaMalloc'd on a stream's first bf16 product on a device and kept for the process's
// life, outside the caching allocator, like the fp32 set's cuBLAS workspaces. One a
// stream, because products enqueued on one stream run in order and so can share it,
// while products on two streams may run at once. A 32 MiB allocation on the first
// product is the one allocation behind the kernels (kernels.h: none per call).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace etr::cuda {

constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

struct LtWorkspace {
  void* ptr;
  size_t bytes;
};

cublasLtHandle_t cublaslt_handle();

LtWorkspace cublaslt_workspace(cudaStream_t stream);

}  // namespace etr::cuda
