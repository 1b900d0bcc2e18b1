// matmul of the CUDA bf16 set: a linear layer, out = inp . weight^T + bias, bf16
// operands and fp32 accumulation through cuBLASLt (the contract of
// runtime/kernels/cpu/matmul.h; the fp32 twin is runtime/kernels/cuda/matmul.h).
//
//   inp      [N, C]     bf16, N = B * T positions
//   weight   [OC, C]    bf16, row o holds the C input weights of output o
//   bias     [OC]       bf16; nullptr: no bias
//   out      [N, OC]    bf16, assigned: bf16(fp32 product + bias), rounded once
//
// backward, given dout [N, OC] (bf16):
//   dinp     [N, C]     bf16 += dout . weight: bf16(dinp + fp32 product)   nullptr: skip
//   dweight  [OC, C]    fp32 += dout^T . inp                               nullptr: skip
//   dbias    [OC]       fp32 += column sums of dout                        nullptr: skip
//
// Products: cublasLtMatmul with CUBLAS_COMPUTE_32F and fp32 alpha/beta; A and B bf16,
// C = D bf16 (out, dinp) or fp32 (dweight: bf16 A/B with fp32 C/D is one of cuBLASLt's
// listed type combinations). The bias is added by the BIAS epilogue when it is 16-byte
// aligned, otherwise broadcast into out first and the product added with beta = 1: the
// bias is bf16 already, so both round the same fp32 sum once. Where cuBLASLt's heuristic
// offers no algorithm (odd leading dimensions, unaligned pointers), the product falls
// back to cublasGemmEx with the same types and fp32 compute (cublas.h's handle). Accumulated
// outputs use beta = 1 (one rounding of old + product for bf16 dinp). The workspace is cublaslt.h's
// (32 MiB a stream); the product's plan (descriptors, algorithm) is cached there by shape,
// types and alignments. dbias is our own column sum in two launches (no atomics): the rows
// split into S chunks of >= 256 (S <= 64, 1 for N < 512), a block a (64-column tile,
// chunk) summing its rows in fp32 in a fixed order, the [S, OC] fp32 partials kept in the
// stream's cuBLASLt workspace, then added per column in chunk order and into dbias once
// (S == 1: the one block a tile adds into dbias itself). See matmul_bf16.cu.
//
// Determinism: the column sums' order depends only on N and OC; cuBLASLt's algorithm is
// its heuristic's first choice for the shapes, types and pointer alignments (the call's,
// chosen once a key per process), and is bitwise reproducible on one GPU model and
// library version. The three gradients are independent
// launches: leaving any out (nullptr) does not change the others. Enqueued on `stream`;
// returns at once. Sizes must fit 32 bits (checked, etr::InvalidArgument); sizes of 0
// behave as in the fp32 set (C == 0: out = bias or 0, and dbias still sums dout).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/dtype.h"

namespace etr::cuda {

void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int64_t N,
                    int64_t C, int64_t OC, cudaStream_t stream);

void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                     const bf16* weight, int64_t N, int64_t C, int64_t OC, cudaStream_t stream);

}  // namespace etr::cuda
