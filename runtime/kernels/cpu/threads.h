// How many threads the CPU kernels use, and how OpenMP and OpenBLAS share them.
//
// One thread pool: OpenMP's. Every kernel runs its outer loop in an OpenMP team of
// num_threads() threads, and the matrix products (matmul, attention) are split by the
// kernels themselves into one block per team thread, each computed by a single-threaded
// OpenBLAS call (blas.h). OpenBLAS's own thread pool (Debian ships the pthreads build) is
// kept at one thread and never woken. The reason is measured (bench/kernels_bench.cc,
// "interplay"): when OpenBLAS runs its own threads, they keep spinning for a while after
// every product, and an OpenMP kernel started next (a layernorm after a matmul) then
// shares its cores with them; with one pool the threads of consecutive kernels are the
// same threads and the cores are never oversubscribed. Calling the pthreads OpenBLAS
// with more than one thread from inside an OpenMP team is also unsafe (OpenBLAS warns
// "Detect OpenMP Loop and this application may hang"), which the attention kernel's
// per-head products would do.
//
// The count is process-wide, like OpenMP's and OpenBLAS's own settings. It is passed to
// every OpenMP region explicitly, so kernels called from any thread (not only the one
// that called set_num_threads) use it. Default: omp_get_max_threads() (OMP_NUM_THREADS,
// else the number of cores). Changing it while a kernel runs is not supported.
#pragma once

namespace etr::cpu {

// Sets the kernels' thread count (n >= 1, else InvalidArgument): OpenMP's to n and
// OpenBLAS's to 1 (see above).
void set_num_threads(int n);

// The kernels' thread count.
int num_threads();

// Puts OpenBLAS back to one thread if something changed it (a benchmark that measures
// OpenBLAS's own threading does): the kernels call this before splitting a product over
// their threads. Cheap (one read of OpenBLAS's setting) when nothing changed.
void ensure_blas_single_threaded();

}  // namespace etr::cpu
