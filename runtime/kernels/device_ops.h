// DeviceOps: the dispatch's second half (runtime/kernels/dispatch.h has the layers'
// kernels): what the training loop and the engines do to flat state on its device,
// whichever device that is: zero it, copy it to and from the host, AdamW over a layout,
// the squared gradient norm into a device scalar and clipping by it, and waiting for a
// stream. Every member takes the stream of the rank (DeviceContext::stream(); ignored on
// the host) and, on a GPU, only enqueues, except `synchronize`.
//
//   const DeviceOps& ops = device_ops(state.device());
//   ops.grad_norm_squared(norm_sq, grads, n, stream);      // device double
//   ops.clip_grad_norm(grads, n, norm_sq, max_norm, stream);
//   ops.adamw_step(layout, p, g, m, v, /*params_bf16=*/nullptr, t, lr, options, stream);
//
// The host's versions are etr::AdamW, etr::grad_norm's sum (squared) and
// etr::clip_grad_norm (runtime/adamw.h); the GPU's are runtime/kernels/cuda/adamw.h's
// (the same arithmetic; the norm's sum in another order, the update within rounding).
// Host pointers given to upload/download should be pinned (PinnedBuffer) for the copy to
// run asynchronously; pageable ones work but wait.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/adamw.h"
#include "runtime/device.h"
#include "runtime/param_layout.h"

namespace etr {

struct DeviceOps {
  const char* name = "";
  void (*zero)(void* p, size_t bytes, void* stream) = nullptr;
  // device <- host and host <- device (plain memcpy on the host).
  void (*upload)(void* device_dst, const void* host_src, size_t bytes, void* stream) = nullptr;
  void (*download)(void* host_dst, const void* device_src, size_t bytes, void* stream) = nullptr;
  void (*synchronize)(void* stream) = nullptr;
  // Waits for every stream of the current device (cudaDeviceSynchronize; nothing on the host).
  void (*synchronize_device)() = nullptr;
  // Events (cudaEvent_t as void*; nullptr and no-ops on the host): created, recorded on a
  // stream after the work enqueued so far, and waited for by the host.
  void* (*event_create)() = nullptr;
  void (*event_destroy)(void* event) = nullptr;
  void (*event_record)(void* event, void* stream) = nullptr;
  void (*event_wait)(void* event) = nullptr;
  // Whether the work before the event's last record has run (true on the host).
  bool (*event_done)(void* event) = nullptr;
  // One AdamW step over [0, layout.numel()) of full flat buffers (o.lr ignored: `lr`).
  // `params_bf16` (mixed precision; nullptr: none): the bf16 copy of the parameters,
  // rewritten with the updated ones rounded to nearest even (on a GPU in the same pass).
  void (*adamw_step)(const ParamLayout& layout, float* params, const float* grads, float* m,
                     float* v, uint16_t* params_bf16, int64_t t, double lr, const AdamWOptions& o,
                     void* stream) = nullptr;
  // AdamW over [begin, end) of the layout (decay by the tensors the range touches), with
  // each pointer at element `begin` of its state: AdamW::update_range's arithmetic.
  void (*adamw_range)(const ParamLayout& layout, int64_t begin, int64_t end, float* params,
                      const float* grads, float* m, float* v, int64_t t, double lr,
                      const AdamWOptions& o, void* stream) = nullptr;
  // device <- device.
  void (*copy)(void* dst, const void* src, size_t bytes, void* stream) = nullptr;
  // x[i] += y[i] (a pipeline's tied gradient from another stage); no overlap but x == y.
  void (*add)(float* x, const float* y, int64_t n, void* stream) = nullptr;
  // x[i] *= factor (clipping by a norm known on the host: etr::clip_grad_norm's product).
  void (*scale)(float* x, int64_t n, float factor, void* stream) = nullptr;
  // *out = sum of x[i]^2 in double, into memory of the device; on the host etr::sum_squares
  // (the ZeRO partial norms' order).
  void (*sum_squares)(double* out, const float* x, int64_t n, void* stream) = nullptr;
  // out[i] = bf16(in[i]), nearest even (the bf16 copy after initialisation or a restore).
  void (*to_bf16)(uint16_t* out, const float* in, int64_t n, void* stream) = nullptr;
  // *out = sum of grads[i]^2 in double, into memory of the device.
  void (*grad_norm_squared)(double* out, const float* grads, int64_t n, void* stream) = nullptr;
  // Scales grads by max_norm / (sqrt(*norm_squared) + 1e-6) when that norm exceeds
  // max_norm > 0 (etr::clip_grad_norm's rule), reading the norm on the device.
  void (*clip_grad_norm)(float* grads, int64_t n, const double* norm_squared, double max_norm,
                         void* stream) = nullptr;
};

// The ops of `device`: the host's, or (ETR_HAVE_CUDA builds) the CUDA ones for a CUDA
// device; InvalidArgument for a CUDA device in a build without CUDA.
const DeviceOps& device_ops(Device device);

// Page-locked host memory for copies to and from `device` (plain heap memory for the
// host); move-only. Throws OutOfMemory when the system refuses it.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(Device device, size_t bytes);
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return bytes_; }

 private:
  void reset();
  bool pinned_ = false;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace etr
