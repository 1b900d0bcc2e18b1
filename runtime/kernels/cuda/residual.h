// residual on the GPU: the residual stream's addition, element-wise (the contract of
// runtime/kernels/cpu/residual.h, float only, device pointers).
//
//   inp1     [n]        the stream (B * T * C elements)
//   inp2     [n]        the branch added to it
//   out      [n]        assigned: inp1 + inp2; may be inp1 or inp2 (in place)
//
// backward, given dout [n]:
//   dinp1    [n]        += dout      } may be the same buffer (then += 2 dout);
//   dinp2    [n]        += dout      } must not overlap dout; neither may be nullptr
//
// Enqueued on `stream`; returns at once. Results are bitwise the CPU's (one IEEE addition
// per element, and 2 dout is exact). A negative n throws etr::InvalidArgument.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace etr::cuda {

void residual_forward(float* out, const float* inp1, const float* inp2, int64_t n,
                      cudaStream_t stream);

void residual_backward(float* dinp1, float* dinp2, const float* dout, int64_t n,
                       cudaStream_t stream);

}  // namespace etr::cuda
