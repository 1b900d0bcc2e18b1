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
      << "encoder sizes must be non-negative and V positive (B " << B << ", T " << T << ", C " << C
      << ", V " << V << ")";
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
void encoder_forward(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe, int64_t B,
                     int64_t T, int64_t C, int64_t V) {
  check_tokens(tokens, B, T, C, V);
  detail::parallel_for(B * T, detail::rows_grain(C), [&](int64_t bt) {
    const int64_t t = bt % T;
    Real* __restrict o = out + bt * C;
    const Real* __restrict we = wte + static_cast<int64_t>(tokens[bt]) * C;
    const Real* __restrict pe = wpe + t * C;
    for (int64_t i = 0; i < C; ++i) o[i] = we[i] + pe[i];
  });
}

// dwte rows [v0, v1) += the gradient of every position holding one of those tokens, in
// position order (so a split into row ranges sums each row alike).
template <typename Real>
void add_token_rows(Real* dwte, const Real* dout, const int32_t* tokens, int64_t BT, int64_t C,
                    int64_t v0, int64_t v1) {
  for (int64_t bt = 0; bt < BT; ++bt) {
    const int64_t token = tokens[bt];
    if (token < v0 || token >= v1) continue;
    Real* __restrict we = dwte + token * C;
    const Real* __restrict d = dout + bt * C;
    for (int64_t c = 0; c < C; ++c) we[c] += d[c];
  }
}

// dwpe rows [t0, t1) += the gradient at those positions, summed over b in order.
template <typename Real>
void add_position_rows(Real* dwpe, const Real* dout, int64_t B, int64_t T, int64_t C, int64_t t0,
                       int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    Real* __restrict pe = dwpe + t * C;
    for (int64_t b = 0; b < B; ++b) {
      const Real* __restrict d = dout + (b * T + t) * C;
      for (int64_t c = 0; c < C; ++c) pe[c] += d[c];
    }
  }
}

template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens, int64_t B,
                      int64_t T, int64_t C, int64_t V) {
  check_tokens(tokens, B, T, C, V);
  const int p = detail::threads_for(B * T * C, detail::kMinElementsPerThread);
  detail::parallel_team(p, [&](int i, int team) {
    // This thread's vocabulary rows and positions.
    add_token_rows(dwte, dout, tokens, B * T, C, V * i / team, V * (i + 1) / team);
    add_position_rows(dwpe, dout, B, T, C, T * i / team, T * (i + 1) / team);
  });
}

template <typename Real>
void encoder_backward_rows(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens,
                           int64_t B, int64_t T, int64_t C, int64_t V, int64_t r0, int64_t r1) {
  check_tokens(tokens, B, T, C, V);
  if (dwte != nullptr) add_token_rows(dwte, dout, tokens, B * T, C, r0, r1);
  if (dwpe != nullptr) add_position_rows(dwpe, dout, B, T, C, r0, std::min(r1, T));
}

#define ETR_INSTANTIATE(Real)                                                                   \
  template void encoder_forward<Real>(Real*, const int32_t*, const Real*, const Real*, int64_t, \
                                      int64_t, int64_t, int64_t);                               \
  template void encoder_backward<Real>(Real*, Real*, const Real*, const int32_t*, int64_t,      \
                                       int64_t, int64_t, int64_t);                               \
  template void encoder_backward_rows<Real>(Real*, Real*, const Real*, const int32_t*, int64_t,    \
                                            int64_t, int64_t, int64_t, int64_t, int64_t);
ETR_INSTANTIATE(float)
ETR_INSTANTIATE(double)
#undef ETR_INSTANTIATE

}  // namespace etr::cpu
