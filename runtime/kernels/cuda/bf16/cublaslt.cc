#include "runtime/kernels/cuda/bf16/cublaslt.h"

#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "runtime/cuda_check.h"

namespace etr::cuda {
namespace {

// The thread's handles by device; destroyed with the thread (errors ignored: at process
// exit the driver may be gone already).
struct LtHandles {
  std::unordered_map<int, cublasLtHandle_t> by_device;
  ~LtHandles() {
    for (auto& [device, handle] : by_device) (void)cublasLtDestroy(handle);
  }
};

int current_device() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

}  // namespace

cublasLtHandle_t cublaslt_handle() {
  thread_local LtHandles handles;
  const int device = current_device();
  auto it = handles.by_device.find(device);
  if (it == handles.by_device.end()) {
    cublasLtHandle_t h = nullptr;
    CUBLAS_CHECK(cublasLtCreate(&h));
    it = handles.by_device.emplace(device, h).first;
  }
  return it->second;
}

LtWorkspace cublaslt_workspace(cudaStream_t stream) {
  // Never freed (see cublaslt.h); the mutex guards the map, not the memory, whose use
  // is ordered by its stream.
  static std::mutex mu;
  static std::map<std::pair<int, cudaStream_t>, void*> by_stream;
  const int device = current_device();
  std::lock_guard<std::mutex> lock(mu);
  void*& p = by_stream[{device, stream}];
  if (p == nullptr) CUDA_CHECK(cudaMalloc(&p, kLtWorkspaceBytes));
  return {p, kLtWorkspaceBytes};
}

}  // namespace etr::cuda
