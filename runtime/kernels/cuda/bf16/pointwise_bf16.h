// The element-wise kernels of the CUDA bf16 set (runtime/kernels/cuda/kernel_set.h,
// kernel_set_bf16): the bf16 twins of the float ones in vector_ops.h, gelu.h and
// residual.h, with the contracts of runtime/kernels/cpu/{elementwise,gelu,residual}.h.
// Every value is widened to fp32, computed in fp32 and rounded once (nearest even) to
// bf16, as the CPU reference runtime/kernels/cpu/bf16_reference.h does.
//
//   fill(out[n], value)                    out = value
//   copy(out[n], inp[n])                   out = inp (out == inp: nothing; no other overlap)
//   add_inplace(out[n], inp[n])            out = bf16(out + inp) (out == inp doubles it)
//   gelu_forward(out[n], inp[n])           out = bf16(gelu(inp)), tanh GELU; out may be inp
//   gelu_backward(dinp[n], inp[n], dout[n])
//                                          dinp = bf16(dinp + gelu'(inp) dout)
//   residual_forward(out[n], inp1[n], inp2[n])
//                                          out = bf16(inp1 + inp2); out may be inp1 or inp2
//   residual_backward(dinp1[n], dinp2[n], dout[n])
//                                          dinp1 = bf16(dinp1 + dout), dinp2 likewise; the
//                                          same buffer gets bf16(d + dout + dout)
//
// Access: 16-byte loads and stores (8 values) when every pointer of the call is 16-byte
// aligned, a scalar tail for n % 8; a call with an unaligned pointer runs all scalar.
// Device pointers; each call enqueues on `stream` and returns at once. n == 0 enqueues
// nothing; n < 0 throws etr::InvalidArgument. No reductions: results do not depend on the
// launch shape.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/dtype.h"

namespace etr::cuda {

void fill(bf16* out, bf16 value, int64_t n, cudaStream_t stream);

void copy(bf16* out, const bf16* inp, int64_t n, cudaStream_t stream);

void add_inplace(bf16* out, const bf16* inp, int64_t n, cudaStream_t stream);

void gelu_forward(bf16* out, const bf16* inp, int64_t n, cudaStream_t stream);

void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n, cudaStream_t stream);

void residual_forward(bf16* out, const bf16* inp1, const bf16* inp2, int64_t n,
                      cudaStream_t stream);

void residual_backward(bf16* dinp1, bf16* dinp2, const bf16* dout, int64_t n, cudaStream_t stream);

}  // namespace etr::cuda
