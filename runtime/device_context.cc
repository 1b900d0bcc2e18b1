#include "runtime/device_context.h"

#include <utility>

#include "runtime/allocator.h"
#include "runtime/bytes.h"
#include "runtime/error.h"
#ifdef ETR_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "runtime/cuda_allocator.h"
#include "runtime/cuda_check.h"
#include "runtime/kernels/cuda/cublas.h"
#endif

namespace etr {

int visible_cuda_devices() {
#ifdef ETR_HAVE_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

Device choose_device(std::string_view setting, int local_rank, int visible) {
  if (setting == "cpu") return Device::cpu();
  if (setting != "cuda" && setting != "auto") {
    throw ConfigError("runtime.device = \"" + std::string(setting) + "\" is not cpu, cuda or auto.");
  }
  if (setting == "auto" && visible == 0) return Device::cpu();
  if (visible == 0) {
#ifdef ETR_HAVE_CUDA
    throw ConfigError("runtime.device = cuda but this process sees no GPU (no driver, no device, "
                      "or CUDA_VISIBLE_DEVICES hides them); use runtime.device = cpu or auto.");
#else
    throw ConfigError("runtime.device = cuda but this etr was built without CUDA; rebuild where "
                      "the CUDA toolkit is found, or use runtime.device = cpu or auto.");
#endif
  }
  return Device::cuda(local_rank % visible);
}

void set_gpu_matmul(std::string_view mode) {
#ifdef ETR_HAVE_CUDA
  cuda::set_matmul_math(mode == "fp32" ? cuda::MatmulMath::kPedantic : cuda::MatmulMath::kTF32);
#else
  (void)mode;
#endif
}

std::unique_ptr<Allocator> make_device_allocator(Device device) {
#ifdef ETR_HAVE_CUDA
  if (device.is_cuda()) return std::make_unique<CudaCachingAllocator>(device.index);
#endif
  throw InvalidArgument("there is no device allocator for " + device.str() + " in this build");
}

DeviceContext DeviceContext::open(Device device) {
  DeviceContext d;
  d.device_ = device;
  if (device.is_cpu()) return d;
#ifdef ETR_HAVE_CUDA
  CUDA_CHECK(cudaSetDevice(device.index));
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  d.stream_ = s;
  return d;
#else
  throw InvalidArgument(device.str() + " in a build without CUDA");
#endif
}

DeviceContext::DeviceContext(DeviceContext&& o) noexcept
    : device_(o.device_), stream_(std::exchange(o.stream_, nullptr)) {}

DeviceContext& DeviceContext::operator=(DeviceContext&& o) noexcept {
  if (this != &o) {
    this->~DeviceContext();
    device_ = o.device_;
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}

DeviceContext::~DeviceContext() {
#ifdef ETR_HAVE_CUDA
  if (stream_) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
#endif
  stream_ = nullptr;
}

void DeviceContext::synchronize() const {
#ifdef ETR_HAVE_CUDA
  if (stream_) CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
#endif
}

std::string DeviceContext::describe() const {
  if (device_.is_cpu()) return "host";
#ifdef ETR_HAVE_CUDA
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, device_.index));
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + "), " +
         format_bytes(static_cast<double>(total)) + " (" + format_bytes(static_cast<double>(free)) +
         " free)";
#else
  return device_.str();
#endif
}

size_t DeviceContext::driver_used_bytes() const {
  if (device_.is_cpu()) return 0;
#ifdef ETR_HAVE_CUDA
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return total - free;
#else
  return 0;
#endif
}

}  // namespace etr
