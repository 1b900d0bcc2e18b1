// layernorm of the CUDA bf16 set: bf16 rows, fp32 statistics and parameter gradients; the
// contract of runtime/kernels/cpu/layernorm.h (fp32 twin: runtime/kernels/cuda/layernorm.h).
//
//   inp      [N, C]     bf16
//   weight   [C]        bf16
//   bias     [C]        bf16
//   out      [N, C]     bf16, assigned: bf16((x - mean) * rstd * weight + bias), fp32 math
//   mean     [N]        fp32, assigned } saved for backward; both nullptr: not saved
//   rstd     [N]        fp32, assigned }
//
// backward, given dout [N, C] (bf16) and the saved mean and rstd:
//   dinp     [N, C]     bf16 += rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),
//                       dxhat = dout weight, computed in fp32 and rounded once
//   dweight  [C]        fp32 += sum over rows of dout xhat
//   dbias    [C]        fp32 += sum over rows of dout
//
// Forward and dinp: one warp a row; 16-byte loads (8 values a lane) when C % 8 == 0 and
// every row pointer is 16-byte aligned, else scalar loads; row sums are lane partials
// combined by a warp butterfly; the variance in two passes (no cancellation). dweight and
// dbias: a two-stage column sum without atomics: the rows split into S chunks of >= 256
// (S <= 64; 1 for N < 512), a block a (64-column tile, chunk) summing dout xhat and dout
// over its rows in fp32 in a fixed order (16-byte loads when C % 8 == 0 and dout, inp
// are aligned), the [S, 2, C] fp32 partials kept in the stream's cuBLASLt workspace
// (cublaslt.h; allocated on the stream's first use) and added per column in chunk order,
// the total added into dweight and dbias once (S == 1: the block adds its own totals).
// Every order is fixed by the sizes: two runs give the same bits.
//
// Device pointers; enqueued on `stream`, returns at once; N == 0 enqueues nothing. N < 0,
// C < 1 or eps <= 0 throw etr::InvalidArgument.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/dtype.h"

namespace etr::cuda {

void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                       const bf16* bias, int64_t N, int64_t C, double eps, cudaStream_t stream);

void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int64_t N,
                        int64_t C, cudaStream_t stream);

}  // namespace etr::cuda
