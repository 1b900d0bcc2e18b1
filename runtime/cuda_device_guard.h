// CudaDeviceGuard: makes `device` the calling thread's current CUDA device for one scope
// and restores the previous one afterwards, so library calls never leave the caller on
// another device.
//
//   { CudaDeviceGuard guard(device_); CUDA_CHECK(cudaMalloc(&p, n)); }
#pragma once

#include <cuda_runtime_api.h>

#include "runtime/cuda_check.h"

namespace etr {

class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) {
    CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) CUDA_CHECK(cudaSetDevice(device));
    switched_ = previous_ != device;
  }
  ~CudaDeviceGuard() {
    if (switched_) (void)cudaSetDevice(previous_);  // best effort: destructors never throw
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};

}  // namespace etr
