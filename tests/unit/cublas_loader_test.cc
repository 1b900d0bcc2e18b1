// runtime/kernels/cuda/cublas_loader.cc: cuBLAS and cuBLASLt are not loaded when a program
// starts, are loaded by the first call, and every function etr forwards exists in them
// under its name; the forwarded calls reach the libraries (their own status names, and
// on a machine without a GPU a failed handle creation, not a crash).
#include "runtime/kernels/cuda/cublas_loader.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace etr {
namespace {

// Whether a file whose name contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::stringstream s;
  s << maps.rdbuf();
  return s.str().find(name) != std::string::npos;
}

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// One test, in this order: "not loaded at start" holds only before the first call.
TEST(CublasLoader, LoadedAtTheFirstCallAndEveryForwardedFunctionResolves) {
  EXPECT_FALSE(mapped("libcublas")) << "cuBLAS was loaded before any call";
  // The library's own text for a status: the call went through to libcublas.
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_ALLOC_FAILED), "CUBLAS_STATUS_ALLOC_FAILED");
  EXPECT_TRUE(mapped("libcublas.so"));
  EXPECT_TRUE(mapped("libcublasLt.so"));  // cuBLAS needs it
  EXPECT_EQ(cublas_loader::open_error(), "");
  ASSERT_EQ(cublas_loader::forwarded().size(), 22u);
  for (const char* name : cublas_loader::forwarded()) {
    EXPECT_TRUE(cublas_loader::resolves(name)) << name << " is not in the library";
  }
  EXPECT_FALSE(cublas_loader::resolves("cublasNoSuchFunction"));
}

TEST(CublasLoader, HandlesAreMadeOnAGpuAndRefusedWithoutOne) {
  cublasHandle_t handle = nullptr;
  const cublasStatus_t made = cublasCreate(&handle);
  if (have_gpu()) {
    ASSERT_EQ(made, CUBLAS_STATUS_SUCCESS) << cublasGetStatusString(made);
    EXPECT_EQ(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasDestroy(handle), CUBLAS_STATUS_SUCCESS);
  } else {
    EXPECT_NE(made, CUBLAS_STATUS_SUCCESS);
    EXPECT_STRNE(cublasGetStatusString(made), "");
  }
  cublasLtMatmulDesc_t desc = nullptr;  // a descriptor needs no device
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
}

}  // namespace
}  // namespace etr
