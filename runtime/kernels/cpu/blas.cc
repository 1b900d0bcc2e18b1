// Typed OpenBLAS products, and their split over the kernels' threads (blas.h).
#include "runtime/kernels/cpu/blas.h"

#include <cblas.h>

#include <climits>

#include "runtime/check.h"
#include "runtime/kernels/cpu/parallel.h"
#include "runtime/kernels/cpu/threads.h"

namespace etr::cpu::detail {
namespace {

// Below this many multiply-adds a product runs on one thread: the OpenMP fork and the
// smaller blocks would cost more than they save (a 64 x 64 x 64 product takes ~5 us).
constexpr int64_t kMinParallelMacs = int64_t{1} << 18;

// Rows or columns per thread at least, and the multiple block boundaries are rounded to
// (OpenBLAS's register blocking on AVX-512 is 16 x 4 / 8 x 8; 16 keeps its full tiles).
constexpr int64_t kBlockAlign = 16;

void check_dims(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  for (int64_t v : {M, N, K, lda, ldb, ldc}) {
    ETR_CHECK(v >= 0 && v <= INT_MAX)
        << "a matrix dimension of " << v << " does not fit OpenBLAS's 32-bit int";
  }
}

void blas_call(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

void blas_call(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
               int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

// C = beta * C, for K == 0 (OpenBLAS versions differ in what they do with an empty sum).
template <typename Real>
void scale_only(int64_t M, int64_t N, Real beta, Real* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    Real* row = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) row[j] = beta == Real(0) ? Real(0) : beta * row[j];
  }
}

}  // namespace

template <typename Real>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, Real alpha, const Real* A,
          int64_t lda, const Real* B, int64_t ldb, Real beta, Real* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) return scale_only(M, N, beta, C, ldc);
  blas_call(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <typename Real>
void parallel_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, Real alpha,
                   const Real* A, int64_t lda, const Real* B, int64_t ldb, Real beta, Real* C,
                   int64_t ldc) {
  if (M == 0 || N == 0) return;
  check_dims(M, N, K, lda, ldb, ldc);
  ensure_blas_single_threaded();
  if (K == 0 || M * N * K < kMinParallelMacs || num_threads() == 1) {
    return gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  if (M >= N) {
    // Rows [m0, m1) of C: rows of op(A), i.e. rows of A, or columns of A^T's storage.
    parallel_ranges(M, kBlockAlign, kBlockAlign, [&](int64_t m0, int64_t m1) {
      const Real* a = trans_a ? A + m0 : A + m0 * lda;
      gemm(trans_a, trans_b, m1 - m0, N, K, alpha, a, lda, B, ldb, beta, C + m0 * ldc, ldc);
    });
  } else {
    // Columns [n0, n1) of C: columns of op(B), i.e. columns of B, or rows of B^T's storage.
    parallel_ranges(N, kBlockAlign, kBlockAlign, [&](int64_t n0, int64_t n1) {
      const Real* b = trans_b ? B + n0 * ldb : B + n0;
      gemm(trans_a, trans_b, M, n1 - n0, K, alpha, A, lda, b, ldb, beta, C + n0, ldc);
    });
  }
}

#define ETR_INSTANTIATE(Real)                                                                 \
  template void gemm<Real>(bool, bool, int64_t, int64_t, int64_t, Real, const Real*, int64_t, \
                           const Real*, int64_t, Real, Real*, int64_t);                       \
  template void parallel_gemm<Real>(bool, bool, int64_t, int64_t, int64_t, Real, const Real*, \
                                    int64_t, const Real*, int64_t, Real, Real*, int64_t);
ETR_INSTANTIATE(float)
ETR_INSTANTIATE(double)
#undef ETR_INSTANTIATE

}  // namespace etr::cpu::detail
