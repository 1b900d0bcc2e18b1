// cuBLAS for the CUDA kernel set: one handle per (thread, device), bound to the stream of
// each call, and the math mode of f32 matrix products.
//
//   cublasHandle_t h = cuda::cublas_handle(stream);  // current device, this thread
//   CUBLAS_CHECK(cublasSgemm(h, ...));                // enqueued on `stream`
//
// Math modes (a process-wide setting; the kernels read it at each call):
//   kTF32      f32 products on tensor cores with TF32 inputs (10-bit mantissa), f32
//              accumulation: the default, PyTorch's allow_tf32 = True
//   kPedantic  true f32 products (CUBLAS_PEDANTIC_MATH): what the tests compare with the
//              CPU kernels at 1e-5
// Handles are made on first use and kept for the thread's life (cuBLAS allocates its own
// workspace per handle).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace etr::cuda {

enum class MatmulMath { kTF32, kPedantic };

void set_matmul_math(MatmulMath math);
MatmulMath matmul_math();

// The calling thread's handle for the current device, set to `stream` and to the math mode.
cublasHandle_t cublas_handle(cudaStream_t stream);

}  // namespace etr::cuda
