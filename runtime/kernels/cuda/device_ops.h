// The CUDA DeviceOps (runtime/kernels/device_ops.h): cudaMemsetAsync/cudaMemcpyAsync on the
// given stream, and the AdamW, norm and clipping kernels of runtime/kernels/cuda/adamw.h.
#pragma once

#include "runtime/kernels/device_ops.h"

namespace etr::cuda {

const DeviceOps& device_ops();

}  // namespace etr::cuda
