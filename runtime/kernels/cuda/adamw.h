// AdamW and the gradient norm on the GPU: the arithmetic of runtime/adamw.{h,cc} on
// device pointers, enqueued on `stream` (each call returns at once, no host reads).
//
//   adamw_update: one AdamW step of a contiguous range with ONE decay setting,
//     params, grads, m, v   [n]   f32; params, m, v updated in place, grads read
//       m = b1 m + (1 - b1) g            v = b2 v + (1 - b2) g^2
//       p -= lr (m / c1 / (sqrt(v / c2) + eps) + weight_decay p)
//     with c1 = 1 - beta1^t, c2 = 1 - beta2^t computed in double on the host and rounded
//     to float, and every other constant rounded to float, as etr::AdamW does. The caller
//     splits its layout into runs: weight_decay = AdamWOptions::weight_decay for the
//     ranges etr::AdamW decays (TensorEntry::weight_decay), 0 for the others (biases,
//     LayerNorm parameters, and the alignment padding between tensors, which etr::AdamW
//     updates undecayed).
//   grad_norm_squared: *norm_squared = sum of grads[i]^2 over [0, n), in double, into a
//     device scalar (etr::grad_norm is its square root).
//   clip_grad_norm: with norm = sqrt(*norm_squared) (read on the device), scales grads[0, n)
//     by float(max_norm / (norm + 1e-6)) when max_norm > 0 and norm > max_norm, and leaves
//     them untouched (bitwise) otherwise: etr::clip_grad_norm's rule and factor.
//
//   params_bf16 (the overloads that take it; nullptr: none): mixed precision's bf16 copy
//     of the parameters [n], written in the same pass as the update: bf16(new p), rounded
//     to nearest even (etr::f32_to_bf16's rounding). to_bf16 writes it from params alone
//     (after initialisation or a restore).
//
// Differences from the CPU versions:
// - grad_norm_squared writes the SQUARED norm into a device scalar (the caller reads it
//   once per step, or hands it to clip_grad_norm without reading it); its additions run
//   in a fixed order set by n alone (deterministic_sum.cuh), bitwise the same run to run,
//   but not the CPU's order (error bound as for cuda::sum, vector_ops.h). n == 0 writes 0.
// - clip_grad_norm takes the squared norm as a device pointer and does not return the
//   factor. Given the same squared norm, the scaled gradients equal the CPU's bitwise
//   (IEEE double sqrt and division, one float multiply per element).
// - adamw_update throws etr::InvalidArgument for n < 0 or t < 1 (the CPU's t = 0 divides
//   by zero). Its float arithmetic may be contracted into fused multiply-adds by nvcc, so
//   it agrees with the CPU to rounding (~1e-7 relative), not bitwise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/adamw.h"
#include "runtime/param_layout.h"

namespace etr::cuda {

// One AdamW step of a whole layout's flat buffers, [0, layout.numel()), split into runs
// as etr::AdamW splits it: the tensors the layout decays with o.weight_decay, everything
// else (other tensors, the alignment padding) with 0. o.lr is ignored: `lr` is the rate.
void adamw_step_layout(const ParamLayout& layout, float* params, const float* grads, float* m,
                       float* v, int64_t t, double lr, const AdamWOptions& o,
                       cudaStream_t stream);

void adamw_step_layout(const ParamLayout& layout, float* params, const float* grads, float* m,
                       float* v, uint16_t* params_bf16, int64_t t, double lr,
                       const AdamWOptions& o, cudaStream_t stream);

// The same over [begin, end) of the layout, each pointer at element `begin` of its state
// (a ZeRO shard's range: etr::AdamW::update_range's split).
// `params_bf16` (nullptr: none) at element `begin` too.
void adamw_range_layout(const ParamLayout& layout, int64_t begin, int64_t end, float* params,
                        const float* grads, float* m, float* v, uint16_t* params_bf16, int64_t t,
                        double lr, const AdamWOptions& o, cudaStream_t stream);

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, int64_t t,
                  double lr, double beta1, double beta2, double eps, double weight_decay,
                  cudaStream_t stream);
void adamw_update(float* params, const float* grads, float* m, float* v, uint16_t* params_bf16,
                  int64_t n, int64_t t, double lr, double beta1, double beta2, double eps,
                  double weight_decay, cudaStream_t stream);

// out[i] = bf16(in[i]) for i < n (nearest even).
void to_bf16(uint16_t* out, const float* in, int64_t n, cudaStream_t stream);

void grad_norm_squared(double* norm_squared, const float* grads, int64_t n, cudaStream_t stream);

void clip_grad_norm(float* grads, int64_t n, const double* norm_squared, double max_norm,
                    cudaStream_t stream);

}  // namespace etr::cuda
