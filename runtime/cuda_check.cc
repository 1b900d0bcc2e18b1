// The throwing halves of CUDA_CHECK, CUBLAS_CHECK and NCCL_CHECK: one message format,
// "<call> failed: <name>: <description> at <file>:<line>".
#include "runtime/cuda_check.h"

#include <string>

#include "runtime/error.h"

namespace etr {

int cuda_device_count() {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    // No driver, no device, or a driver too old for this runtime: none usable. Clear the
    // (non-sticky) error so that later CUDA calls do not report it.
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace etr

namespace etr::detail {

namespace {

std::string where(const char* file, int line) {
  return std::string(" at ") + file + ":" + std::to_string(line);
}

}  // namespace

void cuda_failed(const char* call, cudaError_t code, const char* file, int line) {
  throw Error(std::string(call) + " failed: " + cudaGetErrorName(code) + ": " +
              cudaGetErrorString(code) + where(file, line));
}

void cublas_failed(const char* call, cublasStatus_t code, const char* file, int line) {
  throw Error(std::string(call) + " failed: " + cublasGetStatusName(code) + ": " +
              cublasGetStatusString(code) + where(file, line));
}

const char* nccl_result_name(ncclResult_t code) {
  switch (code) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclResult";
  }
}

void nccl_failed(const char* call, ncclResult_t code, const char* file, int line) {
  std::string msg =
      std::string(call) + " failed: " + nccl_result_name(code) + ": " + ncclGetErrorString(code);
  // NCCL keeps the detailed reason of the last failure (per thread); bare codes would
  // force users to rerun with NCCL_DEBUG=INFO.
  const char* detail = ncclGetLastError(nullptr);
  if (detail && *detail) msg += std::string(" (") + detail + ")";
  throw CommError(msg + where(file, line));
}

}  // namespace etr::detail
