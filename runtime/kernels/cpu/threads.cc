// Thread count of the CPU kernels; threads.h says why OpenBLAS stays at one thread.
#include "runtime/kernels/cpu/threads.h"

#include <cblas.h>
#include <omp.h>

#include <atomic>
#include <string>

#include "runtime/error.h"

namespace etr::cpu {
namespace {

// 0 until first read or set; then the count every kernel's OpenMP region asks for.
std::atomic<int> g_num_threads{0};

}  // namespace

void set_num_threads(int n) {
  if (n < 1) {
    throw InvalidArgument("the CPU kernels need at least one thread, not " + std::to_string(n));
  }
  g_num_threads.store(n, std::memory_order_relaxed);
  omp_set_num_threads(n);
  openblas_set_num_threads(1);
}

int num_threads() {
  int n = g_num_threads.load(std::memory_order_relaxed);
  if (n > 0) return n;
  int expected = 0;
  n = omp_get_max_threads();
  if (n < 1) n = 1;
  // The first reader wins; a concurrent set_num_threads wins over both.
  if (!g_num_threads.compare_exchange_strong(expected, n, std::memory_order_relaxed)) {
    return expected;
  }
  ensure_blas_single_threaded();
  return n;
}

void ensure_blas_single_threaded() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

}  // namespace etr::cpu
