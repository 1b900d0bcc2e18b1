#include "runtime/kernels/cpu/elementwise.h"

#include <algorithm>

#include "runtime/kernels/cpu/parallel.h"

namespace etr::cpu {
namespace {
template <typename F>
void split(int64_t n, F&& f) {
  detail::parallel_ranges(n, 16, detail::kMinElementsPerThread, f);
}
}  // namespace

template <typename Real>
void fill(Real* out, Real value, int64_t n) {
  split(n, [&](int64_t b, int64_t e) { std::fill(out + b, out + e, value); });
}

template <typename Real>
void copy(Real* out, const Real* inp, int64_t n) {
  split(n, [&](int64_t b, int64_t e) { std::copy(inp + b, inp + e, out + b); });
}

template <typename Real>
void add_inplace(Real* out, const Real* inp, int64_t n) {
  split(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] += inp[i];
  });
}

template <typename Real>
double sum(const Real* inp, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += inp[i];
  return s;
}

template <typename Real>
void accumulate_mean(double* acc, const Real* inp, int64_t n, double divisor, double num,
                     double den) {
  *acc += sum(inp, n) / divisor * num / den;
}

#define ETR_INSTANTIATE(Real)                                 \
  template void fill<Real>(Real*, Real, int64_t);            \
  template void copy<Real>(Real*, const Real*, int64_t);     \
  template void add_inplace<Real>(Real*, const Real*, int64_t); \
  template double sum<Real>(const Real*, int64_t);          \
  template void accumulate_mean<Real>(double*, const Real*, int64_t, double, double, double);
ETR_INSTANTIATE(float)
ETR_INSTANTIATE(double)
#undef ETR_INSTANTIATE

}  // namespace etr::cpu
