// DeviceContext: the device a rank trains on (runtime.device) and what runs there: the
// CUDA device made current, the stream every kernel of the rank is enqueued on, and the
// figures the start-up line and the memory report name. On the host it is all trivial
// (Device::cpu(), a null stream), so the training loop has one code path.
//
//   DeviceContext d = DeviceContext::open(choose_device("auto", local_rank, visible));
//   stack.set_context({d.device(), &alloc, d.stream(), ...});
//   d.synchronize();                       // waits for the stream
//   log.info(d.describe());                // "NVIDIA H200 (sm_90), 139.8 GiB (139.3 GiB free)"
//
// Compiled in every build; without CUDA there are no visible devices and choosing cuda
// says so in one sentence.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/device.h"

namespace etr {

// CUDA devices this process sees: 0 without a driver or a GPU, and in a build without CUDA.
int visible_cuda_devices();

// The device of `setting` (runtime.device: cpu, cuda or auto) for a rank with local rank
// `local_rank` when `visible` GPUs are visible: cuda:(local_rank % visible) for cuda, and
// for auto when visible > 0; cpu otherwise. ConfigError with one sentence for cuda with no
// visible GPU (naming whether the build has CUDA at all) or an unknown setting.
Device choose_device(std::string_view setting, int local_rank, int visible);

// Sets the process-wide f32 matrix-product mode of the CUDA kernels from runtime.gpu_matmul
// ("tf32" or "fp32"); nothing without CUDA.
void set_gpu_matmul(std::string_view mode);

class Allocator;

// The caching allocator of CUDA device `device` (runtime/cuda_allocator.h; its budget:
// ETR_CUDA_MEMORY_BUDGET, else the free memory now). InvalidArgument for the host or in a
// build without CUDA.
std::unique_ptr<Allocator> make_device_allocator(Device device);

class DeviceContext {
 public:
  // Makes `device` current on the calling thread and creates its stream (a non-blocking
  // CUDA stream); on the host, nothing.
  static DeviceContext open(Device device);
  DeviceContext() = default;
  DeviceContext(DeviceContext&&) noexcept;
  DeviceContext& operator=(DeviceContext&&) noexcept;
  ~DeviceContext();

  Device device() const { return device_; }
  // cudaStream_t as void*; nullptr on the host.
  void* stream() const { return stream_; }
  // Waits for everything enqueued on the stream (nothing on the host).
  void synchronize() const;
  // "NVIDIA H200 (sm_90), 139.8 GiB (139.3 GiB free)"; "host" on the host.
  std::string describe() const;
  // Device memory in use by anyone (the driver's total - free), for the measured peak;
  // 0 on the host.
  size_t driver_used_bytes() const;

 private:
  Device device_ = Device::cpu();
  void* stream_ = nullptr;
};

}  // namespace etr
