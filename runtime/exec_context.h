// ExecContext: where and how layers compute (docs/design.md, "The training engine": the stage
// seam). A LayerStack hands one to each of its layers; a layer reaches its kernels
// through `kernels` (the device dispatch, runtime/kernels/dispatch.h), allocates nothing
// itself, and records on `tracer` when one is set.
#pragma once

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/trace.h"

namespace etr {

template <typename Real>
struct KernelSet;  // runtime/kernels/dispatch.h

template <typename Real>
struct ExecContext {
  Device device = Device::cpu();
  Allocator* alloc = nullptr;       // where the stack's activations and scratch come from
  void* stream = nullptr;           // cudaStream_t on a GPU; nullptr on the host
  Tracer* tracer = nullptr;         // nullptr: no trace
  const KernelSet<Real>* kernels = nullptr;  // kernels_for<Real>(device)
};

}  // namespace etr
