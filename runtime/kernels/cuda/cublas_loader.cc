// cuBLAS and cuBLASLt opened at their first call, not when a program starts.
//
// Linked the usual way, libcublasLt's static constructors run in every etr process: on
// a CPU-only run that is ~0.1 s of CPU and ~210 MB of resident memory a rank (page faults
// of tables it fills at load), paid again at every elastic relaunch and by every test. So
// etr_runtime does not link either library: it defines the cuBLAS and cuBLASLt functions
// etr calls (the declarations of cublas_v2.h and cublasLt.h, so a wrong signature does
// not compile), and each forwards to the real one, found with dlopen and dlsym the first
// time it is called. The libraries are looked up as the dynamic linker would have
// (LD_LIBRARY_PATH, the program's RUNPATH, the system's cache) under the soname of the
// toolkit etr was built with. Where one cannot be opened, its functions return
// CUBLAS_STATUS_NOT_INITIALIZED and cublasGetStatusString says why (CUBLAS_CHECK's error).
//
// A function etr starts to call must be added here (the link fails until it is).
// tests/unit/cublas_loader_test.cc resolves every one of them.
#include "runtime/kernels/cuda/cublas_loader.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

namespace etr::cublas_loader {
namespace {

struct Library {
  explicit Library(const char* name) : soname(name) {}
  const char* soname;
  void* handle = nullptr;
  std::string error;  // why it could not be opened ("" when it was, or not yet tried)
  std::once_flag opened;
};

Library blas{ETR_CUBLAS_SONAME};
Library lt{ETR_CUBLASLT_SONAME};

void* open(Library& lib) {
  std::call_once(lib.opened, [&lib] {
    lib.handle = ::dlopen(lib.soname, RTLD_NOW | RTLD_LOCAL);
    if (!lib.handle) {
      const char* why = ::dlerror();
      lib.error = std::string("cannot open ") + lib.soname + " (" + (why ? why : "?") + ")";
    }
  });
  return lib.handle;
}

void* symbol(Library& lib, const char* name) {
  void* handle = open(lib);
  return handle ? ::dlsym(handle, name) : nullptr;
}

// The real function `name` of `lib`, resolved once a call site (null: unavailable).
template <typename F>
F resolve(Library& lib, const char* name) {
  return reinterpret_cast<F>(symbol(lib, name));
}

constexpr cublasStatus_t kUnavailable = CUBLAS_STATUS_NOT_INITIALIZED;

}  // namespace

std::string open_error() {
  open(blas);
  open(lt);
  return !blas.error.empty() ? blas.error : lt.error;
}

std::span<const char* const> forwarded() {
  static constexpr const char* kNames[] = {
      "cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasSetMathMode",
      "cublasGetStatusName", "cublasGetStatusString", "cublasSgemm_v2",
      "cublasSgemmStridedBatched", "cublasGemmEx", "cublasGemmStridedBatchedEx",
      "cublasLtCreate", "cublasLtDestroy", "cublasLtMatmul", "cublasLtMatmulAlgoGetHeuristic",
      "cublasLtMatmulDescCreate", "cublasLtMatmulDescDestroy", "cublasLtMatmulDescSetAttribute",
      "cublasLtMatmulPreferenceCreate", "cublasLtMatmulPreferenceDestroy",
      "cublasLtMatmulPreferenceSetAttribute", "cublasLtMatrixLayoutCreate",
      "cublasLtMatrixLayoutDestroy"};
  return kNames;
}

bool resolves(const char* name) {
  const bool in_lt = std::string(name).starts_with("cublasLt");
  return symbol(in_lt ? lt : blas, name) != nullptr;
}

}  // namespace etr::cublas_loader

using etr::cublas_loader::blas;
using etr::cublas_loader::kUnavailable;
using etr::cublas_loader::lt;
using etr::cublas_loader::resolve;

// One forwarding definition a function: F is its own type, so the real one has the same
// (ETR_FORWARD_AS names it where cublas_api.h overloads the name for C++).
#define ETR_FORWARD_AS(type, lib, name, ...)              \
  static const auto real = resolve<type>(lib, #name);     \
  return real ? real(__VA_ARGS__) : kUnavailable
#define ETR_FORWARD(lib, name, ...) ETR_FORWARD_AS(decltype(&name), lib, name, __VA_ARGS__)

using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                  int, const void*, const void*, cudaDataType, int, const void*,
                                  cudaDataType, int, const void*, void*, cudaDataType, int,
                                  cublasComputeType_t, cublasGemmAlgo_t);
using GemmStridedBatchedEx = cublasStatus_t (*)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
    cudaDataType, int, long long int, const void*, cudaDataType, int, long long int, const void*,
    void*, cudaDataType, int, long long int, int, cublasComputeType_t, cublasGemmAlgo_t);

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  ETR_FORWARD(blas, cublasCreate_v2, handle);
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  ETR_FORWARD(blas, cublasDestroy_v2, handle);
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  ETR_FORWARD(blas, cublasSetStream_v2, handle, stream);
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  ETR_FORWARD(blas, cublasSetMathMode, handle, mode);
}

const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  static const auto real = resolve<decltype(&cublasGetStatusName)>(blas, "cublasGetStatusName");
  return real ? real(status) : "CUBLAS_STATUS_NOT_INITIALIZED";
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  static const auto real = resolve<decltype(&cublasGetStatusString)>(blas, "cublasGetStatusString");
  if (real) return real(status);
  static const std::string why = etr::cublas_loader::open_error();
  return why.c_str();
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                                           cublasOperation_t transb, int m, int n, int k,
                                           const float* alpha, const float* A, int lda,
                                           const float* B, int ldb, const float* beta, float* C,
                                           int ldc) {
  ETR_FORWARD(blas, cublasSgemm_v2, handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta,
              C, ldc);
}

cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const float* alpha, const float* A, int lda, long long int strideA, const float* B, int ldb,
    long long int strideB, const float* beta, float* C, int ldc, long long int strideC,
    int batchCount) {
  ETR_FORWARD(blas, cublasSgemmStridedBatched, handle, transa, transb, m, n, k, alpha, A, lda,
              strideA, B, ldb, strideB, beta, C, ldc, strideC, batchCount);
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb,
                                         const void* beta, void* C, cudaDataType Ctype, int ldc,
                                         cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  ETR_FORWARD_AS(GemmEx, blas, cublasGemmEx, handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype,
              ldb, beta, C, Ctype, ldc, computeType, algo);
}

cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA,
    const void* B, cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C,
    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  ETR_FORWARD_AS(GemmStridedBatchedEx, blas, cublasGemmStridedBatchedEx, handle, transa, transb, m, n, k, alpha, A, Atype,
              lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount,
              computeType, algo);
}

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  ETR_FORWARD(lt, cublasLtCreate, handle);
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  ETR_FORWARD(lt, cublasLtDestroy, handle);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                           const void* alpha, const void* A,
                                           cublasLtMatrixLayout_t Adesc, const void* B,
                                           cublasLtMatrixLayout_t Bdesc, const void* beta,
                                           const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                                           cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace,
                                           size_t workspaceSizeInBytes, cudaStream_t stream) {
  ETR_FORWARD(lt, cublasLtMatmul, handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D,
              Ddesc, algo, workspace, workspaceSizeInBytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
  ETR_FORWARD(lt, cublasLtMatmulAlgoGetHeuristic, handle, desc, Adesc, Bdesc, Cdesc, Ddesc,
              preference, requestedAlgoCount, heuristicResultsArray, returnAlgoCount);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                     cublasComputeType_t computeType,
                                                     cudaDataType_t scaleType) {
  ETR_FORWARD(lt, cublasLtMatmulDescCreate, desc, computeType, scaleType);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  ETR_FORWARD(lt, cublasLtMatmulDescDestroy, desc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t sizeInBytes) {
  ETR_FORWARD(lt, cublasLtMatmulDescSetAttribute, desc, attr, buf, sizeInBytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  ETR_FORWARD(lt, cublasLtMatmulPreferenceCreate, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  ETR_FORWARD(lt, cublasLtMatmulPreferenceDestroy, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t sizeInBytes) {
  ETR_FORWARD(lt, cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, sizeInBytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  ETR_FORWARD(lt, cublasLtMatrixLayoutCreate, layout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  ETR_FORWARD(lt, cublasLtMatrixLayoutDestroy, layout);
}

}  // extern "C"
