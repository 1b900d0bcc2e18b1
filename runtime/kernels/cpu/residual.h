// residual: the residual stream's addition, element-wise.
//
//   inp1     [n]        the stream (B * T * C elements)
//   inp2     [n]        the branch added to it
//   out      [n]        assigned: inp1 + inp2; may be inp1 or inp2 (in place)
//
// backward, given dout [n]:
//   dinp1    [n]        += dout      } may be the same buffer (then += 2 dout);
//   dinp2    [n]        += dout      } must not overlap dout
//
// Elements split over the threads.
#pragma once

#include <cstdint>

namespace etr::cpu {

template <typename Real>
void residual_forward(Real* out, const Real* inp1, const Real* inp2, int64_t n);

template <typename Real>
void residual_backward(Real* dinp1, Real* dinp2, const Real* dout, int64_t n);

}  // namespace etr::cpu
