// The CUDA kernel set behind the dispatch (runtime/kernels/dispatch.h): kernels_for<float>
// on a CUDA device returns it. Each member calls the etr::cuda kernel of its name on the
// stream it is given (a cudaStream_t as void*), on the calling thread's current device.
//
// `sum` is the one member that waits: it sums into a small device scratch (one double per
// device and thread, made on first use and kept) and copies the result back, synchronising
// the stream, because the dispatch's sum returns a host double (a micro-batch's loss).
#pragma once

#include "runtime/kernels/dispatch.h"

namespace etr::cuda {

const KernelSet<float>& kernel_set();

}  // namespace etr::cuda
