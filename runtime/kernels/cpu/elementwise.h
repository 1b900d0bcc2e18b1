// Elementwise kernels the layers and the layer stack need between the model's kernel
// families: zeroing a gradient, copying one, adding one into another, summing losses.
//
//   fill(out[n], value)          out = value
//   copy(out[n], inp[n])         out = inp
//   add_inplace(out[n], inp[n])  out += inp  (a gradient arriving by a second path)
//   sum(inp[n]) -> double        sequential double sum (the loss of a micro-batch: the
//                                order is fixed so that losses are bitwise reproducible)
//   accumulate_mean(acc, inp[n], divisor, num, den)
//                                *acc += sum(inp) / divisor * num / den (a micro-batch's share
//                                of a step's loss; on a GPU it stays on the device)
#pragma once

#include <cstdint>

namespace etr::cpu {

template <typename Real>
void fill(Real* out, Real value, int64_t n);

template <typename Real>
void copy(Real* out, const Real* inp, int64_t n);

template <typename Real>
void add_inplace(Real* out, const Real* inp, int64_t n);

template <typename Real>
double sum(const Real* inp, int64_t n);

template <typename Real>
void accumulate_mean(double* acc, const Real* inp, int64_t n, double divisor, double num,
                     double den);

}  // namespace etr::cpu
