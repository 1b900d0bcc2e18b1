#include "runtime/kernels/cuda/device_ops.h"

#include <cuda_runtime_api.h>

#include "runtime/cuda_check.h"
#include "runtime/kernels/cuda/adamw.h"
#include "runtime/kernels/cuda/elementwise.h"
#include "runtime/kernels/cuda/vector_ops.h"

namespace etr::cuda {
namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

DeviceOps make_ops() {
  DeviceOps o;
  o.name = "cuda";
  o.zero = [](void* p, size_t bytes, void* s) {
    if (bytes > 0) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, as_stream(s)));
  };
  o.upload = [](void* dst, const void* src, size_t bytes, void* s) {
    if (bytes > 0) {
      CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, as_stream(s)));
    }
  };
  o.download = [](void* dst, const void* src, size_t bytes, void* s) {
    if (bytes > 0) {
      CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, as_stream(s)));
    }
  };
  o.synchronize = [](void* s) { CUDA_CHECK(cudaStreamSynchronize(as_stream(s))); };
  o.synchronize_device = [] { CUDA_CHECK(cudaDeviceSynchronize()); };
  o.event_create = []() -> void* {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  };
  o.event_destroy = [](void* e) {
    if (e) (void)cudaEventDestroy(static_cast<cudaEvent_t>(e));
  };
  o.event_record = [](void* e, void* s) {
    CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(e), as_stream(s)));
  };
  o.event_wait = [](void* e) { CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e))); };
  o.event_done = [](void* e) {
    const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (r == cudaErrorNotReady) return false;
    CUDA_CHECK(r);
    return true;
  };
  o.adamw_step = [](const ParamLayout& layout, float* p, const float* g, float* m, float* v,
                    uint16_t* p16, int64_t t, double lr, const AdamWOptions& opt, void* s) {
    adamw_step_layout(layout, p, g, m, v, p16, t, lr, opt, as_stream(s));
  };
  o.adamw_range = [](const ParamLayout& layout, int64_t begin, int64_t end, float* p, const float* g,
                     float* m, float* v, int64_t t, double lr, const AdamWOptions& opt, void* s) {
    adamw_range_layout(layout, begin, end, p, g, m, v, nullptr, t, lr, opt, as_stream(s));
  };
  o.copy = [](void* dst, const void* src, size_t bytes, void* s) {
    if (bytes > 0 && dst != src) {
      CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, as_stream(s)));
    }
  };
  o.add = [](float* x, const float* y, int64_t n, void* s) {
    if (n > 0) add_inplace(x, y, n, as_stream(s));
  };
  o.scale = [](float* x, int64_t n, float factor, void* s) {
    if (n > 0) cuda_scale(x, DType::kF32, n, factor, as_stream(s));
  };
  o.sum_squares = [](double* out, const float* x, int64_t n, void* s) {
    grad_norm_squared(out, x, n, as_stream(s));
  };
  o.to_bf16 = [](uint16_t* out, const float* in, int64_t n, void* s) {
    to_bf16(out, in, n, as_stream(s));
  };
  o.grad_norm_squared = [](double* out, const float* g, int64_t n, void* s) {
    grad_norm_squared(out, g, n, as_stream(s));
  };
  o.clip_grad_norm = [](float* g, int64_t n, const double* norm_squared, double max_norm,
                        void* s) { clip_grad_norm(g, n, norm_squared, max_norm, as_stream(s)); };
  return o;
}

}  // namespace

const DeviceOps& device_ops() {
  static const DeviceOps ops = make_ops();
  return ops;
}

}  // namespace etr::cuda
