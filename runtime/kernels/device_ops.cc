#include "runtime/kernels/device_ops.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "runtime/allocator.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#ifdef ETR_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "runtime/cuda_check.h"
#include "runtime/kernels/cuda/device_ops.h"
#endif

namespace etr {
namespace {

void round_to_bf16(uint16_t* out, const float* in, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

DeviceOps make_host_ops() {
  DeviceOps o;
  o.name = "cpu";
  o.zero = [](void* p, size_t bytes, void*) {
    if (bytes > 0) std::memset(p, 0, bytes);
  };
  o.upload = [](void* dst, const void* src, size_t bytes, void*) {
    if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
  };
  o.download = o.upload;
  o.synchronize = [](void*) {};
  o.synchronize_device = [] {};
  o.event_create = []() -> void* { return nullptr; };
  o.event_destroy = [](void*) {};
  o.event_record = [](void*, void*) {};
  o.event_wait = [](void*) {};
  o.event_done = [](void*) { return true; };
  o.adamw_step = [](const ParamLayout& layout, float* p, const float* g, float* m, float* v,
                    uint16_t* p16, int64_t t, double lr, const AdamWOptions& opt, void*) {
    AdamW(layout).step(p, g, m, v, 0, layout.numel(), t, lr, opt);
    if (p16 != nullptr) round_to_bf16(p16, p, layout.numel());
  };
  o.adamw_range = [](const ParamLayout& layout, int64_t begin, int64_t end, float* p, const float* g,
                     float* m, float* v, int64_t t, double lr, const AdamWOptions& opt, void*) {
    AdamW(layout).update_range(begin, end, p, g, m, v, t, lr, opt);
  };
  o.copy = [](void* dst, const void* src, size_t bytes, void*) {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
  };
  o.add = [](float* x, const float* y, int64_t n, void*) {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
  };
  o.scale = [](float* x, int64_t n, float factor, void*) {
    for (int64_t i = 0; i < n; ++i) x[i] *= factor;
  };
  o.sum_squares = [](double* out, const float* x, int64_t n, void*) { *out = sum_squares(x, n); };
  o.to_bf16 = [](uint16_t* out, const float* in, int64_t n, void*) { round_to_bf16(out, in, n); };
  o.grad_norm_squared = [](double* out, const float* g, int64_t n, void*) {
    *out = grad_norm_squared(g, n);
  };
  o.clip_grad_norm = [](float* g, int64_t n, const double* norm_squared, double max_norm, void*) {
    clip_grad_norm(g, n, std::sqrt(*norm_squared), max_norm);
  };
  return o;
}

}  // namespace

const DeviceOps& device_ops(Device device) {
  static const DeviceOps host = make_host_ops();
  if (device.is_cpu()) return host;
#ifdef ETR_HAVE_CUDA
  return cuda::device_ops();
#else
  throw InvalidArgument(device.str() + " in a build without CUDA: its state cannot be used");
#endif
}

PinnedBuffer::PinnedBuffer(Device device, size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
#ifdef ETR_HAVE_CUDA
  if (device.is_cuda()) {
    if (cudaMallocHost(&data_, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      data_ = nullptr;
      throw_out_of_memory(Device::cpu(), bytes, MemoryStats{},
                          "the system refused page-locked host memory for copies to and from the GPU");
    }
    pinned_ = true;
    return;
  }
#endif
  (void)device;
  data_ = std::malloc(bytes);
  if (!data_) throw_out_of_memory(Device::cpu(), bytes, MemoryStats{}, "the system refused host staging memory");
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : pinned_(o.pinned_), data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    pinned_ = o.pinned_;
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() { reset(); }

void PinnedBuffer::reset() {
  if (!data_) return;
#ifdef ETR_HAVE_CUDA
  if (pinned_) {
    (void)cudaFreeHost(data_);
    data_ = nullptr;
    return;
  }
#endif
  std::free(data_);
  data_ = nullptr;
}

}  // namespace etr
