// The CUDA kernel set behind the dispatch (runtime/kernels/dispatch.h): kernels_for<float>
// on a CUDA device returns it, the same set for every device index. Each member calls the
// etr::cuda kernel of its name on the stream it is given (a cudaStream_t as void*), on the
// calling thread's CURRENT device: whoever runs a stack placed on Device::cuda(i) makes
// device i current first (cudaSetDevice, CudaDeviceGuard), as the allocator's and the
// stream's device must be that one too.
//
// `sum` is the one member that waits: it sums into a small device scratch (one double per
// device and thread, cudaMalloc'd on first use, outside the caching allocator, and kept for
// the process's life) and copies the result back, synchronising the stream, because the
// dispatch's sum returns a host double (evaluation, tests). Training accumulates its loss
// on the device with `accumulate_mean` and reads it once per step.
#pragma once

#include "runtime/kernels/dispatch.h"

namespace etr::cuda {

const KernelSet<float>& kernel_set();

// The bf16 set (runtime.precision bf16): bf16 activations and parameter copies, fp32
// parameter gradients, LayerNorm statistics and losses (runtime/kernels/cuda/bf16/).
const KernelSet<bf16>& kernel_set_bf16();

}  // namespace etr::cuda
