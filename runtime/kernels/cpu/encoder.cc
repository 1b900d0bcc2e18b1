// encoder forward/backward (encoder.h): tokens [B, T], wte [Vp, C], wpe [maxT, C],
// out [B, T, C]; dout [B, T, C], dwte [Vp, C], dwpe [maxT, C].
#include "runtime/kernels/cpu/encoder.h"

#include <algorithm>
#include <string>

#include "runtime/check.h"
#include "runtime/error.h"
#include "runtime/kernels/cpu/parallel.h"

namespace etr::cpu {
namespace {

void check_tokens(const int32_t* tokens, int64_t B, int64_t T, int64_t C, int64_t V) {
  ETR_CHECK(B >= 0 && T >= 0 && C >= 0 && V > 0)
      << "encoder sizes must be non-negative and V positive (B " << B << ", T " << T << ", C "
      << C << ", V " << V << ")";
  for (int64_t i = 0; i < B * T; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V) {
      throw InvalidArgument("token " + std::to_string(tokens[i]) + " at position " +
                            std::to_string(i) + " is outside the vocabulary [0, " +
                            std::to_string(V) + "): the input was tokenized for another model");
    }
  }
}

}  // namespace

template <typename Real>
void encoder_forward(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe,
                     int64_t B, int64_t T, int64_t C, int64_t V) {
  check_tokens(tokens, B, T, C, V);
  detail::parallel_for(B * T, detail::rows_grain(C), [&](int64_t bt) {
    const int64_t t = bt % T;
    Real* __restrict o = out + bt * C;
    const Real* __restrict we = wte + static_cast<int64_t>(tokens[bt]) * C;
    const Real* __restrict pe = wpe + t * C;
    for (int64_t i = 0; i < C; ++i) o[i] = we[i] + pe[i];
  });
}

template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens, int64_t B,
                      int64_t T, int64_t C, int64_t V) {
  check_tokens(tokens, B, T, C, V);
  detail::parallel_ranges(C, 16, std::max<int64_t>(16, detail::rows_grain(B * T)), [&](int64_t c0, int64_t c1) {
    const int64_t width = c1 - c0;
    for (int64_t bt = 0; bt < B * T; ++bt) {
      const Real* __restrict d = dout + bt * C + c0;
      // dwte and dwpe are distinct tables; within one step each row is written once.
      Real* __restrict we = dwte + static_cast<int64_t>(tokens[bt]) * C + c0;
      Real* __restrict pe = dwpe + (bt % T) * C + c0;
      for (int64_t i = 0; i < width; ++i) {
        we[i] += d[i];
        pe[i] += d[i];
      }
    }
  });
}

#define ETR_INSTANTIATE(Real)                                                                 \
  template void encoder_forward<Real>(Real*, const int32_t*, const Real*, const Real*, int64_t, \
                                      int64_t, int64_t, int64_t);                             \
  template void encoder_backward<Real>(Real*, Real*, const Real*, const int32_t*, int64_t,    \
                                       int64_t, int64_t, int64_t);
ETR_INSTANTIATE(float)
ETR_INSTANTIATE(double)
#undef ETR_INSTANTIATE

}  // namespace etr::cpu
