// gelu: GPT-2's GELU, tanh approximation, element-wise (the MLP's activation):
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//
//   inp      [n]        any shape, n elements (B * T * 4C in the MLP)
//   out      [n]        assigned; may be the same buffer as inp (in place), no other overlap
//
// backward, given dout [n] and the forward's input:
//   dinp     [n]        += dout * gelu'(inp); must not overlap dout or inp
//
// tanh is vec_math.h's (vectorised; glibc's scalar tanhf would make GELU cost as much as
// the matrix product beside it). Elements split over the threads.
#pragma once

#include <cstdint>

namespace etr::cpu {

template <typename Real>
void gelu_forward(Real* out, const Real* inp, int64_t n);

template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, int64_t n);

}  // namespace etr::cpu
