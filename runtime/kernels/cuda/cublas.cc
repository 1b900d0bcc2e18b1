#include "runtime/kernels/cuda/cublas.h"

#include <atomic>
#include <unordered_map>

#include "runtime/cuda_check.h"

namespace etr::cuda {

namespace {

std::atomic<MatmulMath> g_math{MatmulMath::kTF32};

// The thread's handles by device; destroyed with the thread (errors ignored: at process
// exit the driver may be gone already).
struct Handles {
  std::unordered_map<int, cublasHandle_t> by_device;
  ~Handles() {
    for (auto& [device, handle] : by_device) (void)cublasDestroy(handle);
  }
};

}  // namespace

void set_matmul_math(MatmulMath math) { g_math.store(math); }

MatmulMath matmul_math() { return g_math.load(); }

cublasHandle_t cublas_handle(cudaStream_t stream) {
  thread_local Handles handles;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  auto it = handles.by_device.find(device);
  if (it == handles.by_device.end()) {
    cublasHandle_t h = nullptr;
    CUBLAS_CHECK(cublasCreate(&h));
    it = handles.by_device.emplace(device, h).first;
  }
  cublasHandle_t h = it->second;
  CUBLAS_CHECK(cublasSetStream(h, stream));
  CUBLAS_CHECK(cublasSetMathMode(h, matmul_math() == MatmulMath::kPedantic
                                        ? CUBLAS_PEDANTIC_MATH
                                        : CUBLAS_TF32_TENSOR_OP_MATH));
  return h;
}

}  // namespace etr::cuda
