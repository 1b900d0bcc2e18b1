// LocalNormMeter: this rank's squared gradient norm before a step's sums (the gradient
// noise scale's small batch, parallel/goodput.h), for gradients on a device: each bucket's
// sum of squares enqueued on the rank's stream just before the bucket's collective is
// launched (so NCCL's stream, or the staged download, waits for it), into a device slot of
// its own; read() adds the slots on the host after one wait. BucketReducer's own
// measurement reads host memory; this is its device form.
#pragma once

#include <cstddef>

#include "parallel/bucket_reducer.h"
#include "runtime/allocator.h"
#include "runtime/kernels/device_ops.h"

namespace etr {

class LocalNormMeter {
 public:
  // Slots for every bucket of `reducer` from `alloc` (the gradients' device).
  LocalNormMeter(BucketReducer& reducer, Allocator& alloc, void* stream);
  // Installs (on) or removes (off) the reducer's before-launch hook.
  void measure(bool on);
  bool measuring() const { return on_; }
  // The step's sum over its buckets (waits for the stream); NaN when not measuring.
  double read() const;

 private:
  BucketReducer& reducer_;
  const DeviceOps& ops_;
  void* stream_;
  Buffer slots_;
  mutable PinnedBuffer host_;
  bool on_ = false;
};

}  // namespace etr
