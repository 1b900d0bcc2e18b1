// Internal to the CPU kernels (include only from runtime/kernels/cpu/*.cc, which are
// compiled with OpenMP): splitting a loop over the kernels' threads.
//
// Every split is static and contiguous: thread i of p gets the i-th range. Kernels that
// reduce (a bias gradient, a layernorm weight gradient, an embedding gradient) split the
// OUTPUT of the reduction across threads, never the summed-over index, so each output
// element is summed by one thread in a fixed order and the result does not depend on the
// thread count (tests/unit/kernels_threads_test.cc checks it).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "runtime/kernels/cpu/threads.h"

namespace etr::cpu::detail {

// Threads worth using for `work` units when one thread should get at least `grain`.
inline int threads_for(int64_t work, int64_t grain) {
  const int64_t useful = grain > 0 ? std::max<int64_t>(1, work / grain) : work;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_threads(), useful)));
}

// Elements one thread should get at least: below this an OpenMP fork and join (a few
// microseconds, far more when the cores are shared) costs more than the work.
inline constexpr int64_t kMinElementsPerThread = int64_t{1} << 14;

// The grain, in rows, of a loop over rows of `row_elements` elements each.
inline int64_t rows_grain(int64_t row_elements) {
  return std::max<int64_t>(1, kMinElementsPerThread / std::max<int64_t>(1, row_elements));
}

// Runs f(begin, end) on contiguous ranges covering [0, n), one per thread, every range
// boundary a multiple of `align` (so that threads writing neighbouring ranges of a float
// array do not share cache lines when align >= 16). At most n / grain threads; with one,
// f(0, n) runs on the calling thread without an OpenMP region. f must not throw.
template <typename F>
void parallel_ranges(int64_t n, int64_t align, int64_t grain, F&& f) {
  if (n <= 0) return;
  const int p = threads_for(n, grain);
  if (p == 1) {
    f(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(p)
  {
    // The team may be smaller than asked (a call from inside another OpenMP region gets
    // one thread): split by the team that is there.
    const int64_t team = omp_get_num_threads();
    const int64_t per = (n + team - 1) / team;
    const int64_t chunk = (per + align - 1) / align * align;
    const int64_t begin = std::min<int64_t>(n, omp_get_thread_num() * chunk);
    const int64_t end = std::min<int64_t>(n, begin + chunk);
    if (begin < end) f(begin, end);
  }
}

// Runs f(i, team) on every thread i of a team of (at most) p threads; with p == 1,
// f(0, 1) on the calling thread without an OpenMP region. f must not throw.
template <typename F>
void parallel_team(int p, F&& f) {
  if (p <= 1) {
    f(0, 1);
    return;
  }
#pragma omp parallel num_threads(p)
  f(omp_get_thread_num(), omp_get_num_threads());
}

// Runs f(i) for every i in [0, n), the indices split statically over the threads (at most
// n / grain of them). f must not throw.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  const int p = threads_for(n, grain);
  if (p == 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for num_threads(p) schedule(static)
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace etr::cpu::detail
