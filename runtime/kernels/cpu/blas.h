// Internal to the CPU kernels: general matrix products through OpenBLAS, typed.
//
//   C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C        (all row-major)
//   op(A) = A, stored [M, K] with row stride lda, or A^T (trans_a), A stored [K, M];
//   op(B) = B, stored [K, N] with row stride ldb, or B^T (trans_b), B stored [N, K];
//   C stored [M, N] with row stride ldc.
//
// gemm runs on the calling thread (OpenBLAS at one thread, threads.h); call it from
// inside an OpenMP team for one block of a larger product. parallel_gemm splits C into
// num_threads() blocks of rows (when M >= N) or columns and runs one gemm per thread: no
// block depends on another, and each element of C is summed over K by one call in the
// same order whatever the split, so the result does not depend on the thread count.
// float calls sgemm, double dgemm. Sizes must fit OpenBLAS's 32-bit int (checked).
#pragma once

#include <cstdint>

namespace etr::cpu::detail {

template <typename Real>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, Real alpha, const Real* A,
          int64_t lda, const Real* B, int64_t ldb, Real beta, Real* C, int64_t ldc);

template <typename Real>
void parallel_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, Real alpha,
                   const Real* A, int64_t lda, const Real* B, int64_t ldb, Real beta, Real* C,
                   int64_t ldc);

}  // namespace etr::cpu::detail
