// How many threads the CPU kernels use, and how OpenMP and OpenBLAS share them.
//
// One thread pool: OpenMP's. Every kernel runs its outer loop in an OpenMP team of
// num_threads() threads, and the matrix products (matmul, attention) are split by the
// kernels themselves into one block per team thread, each computed by a single-threaded
// OpenBLAS call (blas.h). OpenBLAS's own thread pool (Debian ships the pthreads build) is
// kept at one thread and never woken. Measured with bench/kernels_bench.cc on this
// project's 2-core machine, B 8 T 128 C 256 (quiet cores):
// - a product split this way is as fast as OpenBLAS's own threading: [1024, 256] x
//   [256, 768] 97 -> 195 GFLOP/s from 1 to 2 threads (OpenBLAS's threads: 96 -> 184);
// - a layernorm forward [1024, 256]: 100 -> 57 us;
// - the pair back to back ("interplay"): 2.27 ms with one pool, 6.32 ms (slower than one
//   thread, 4.2 ms) with OpenBLAS's threads for the product and OpenMP's for the
//   layernorm: each pool's workers keep spinning for a while after their work and take
//   the cores from the other's.
// Calling the pthreads OpenBLAS with more than one thread from inside an OpenMP team is
// also unsafe (OpenBLAS warns "Detect OpenMP Loop and this application may hang"), which
// the attention kernel's per-head products would do.
//
// Shared cores: libgomp spins while it waits (at the end of a region, for the next one),
// and when another process holds one of the cores, a team waiting for its descheduled
// member burns its own share of the CPU. Measured, 2 threads, one busy process from
// another session on the second core (quiet cores in brackets):
//   layernorm forward [1024, 256]:   default 7.7 ms (0.06)  GOMP_SPINCOUNT=10000 0.66 ms
//                                    (0.06)  OMP_WAIT_POLICY=passive 0.11 ms (0.11)
//   residual forward [1024 x 256]:   default 8.5 ms (0.024)  10000: 0.60 ms (0.025)
//                                    passive 0.047 ms (0.091)
// libgomp reads these variables when the program starts, so the library cannot set them;
// a launcher should: GOMP_SPINCOUNT=10000 costs nothing on idle cores and bounds the
// damage on shared ones; OMP_WAIT_POLICY=passive is best on shared cores but adds
// ~50 us to every parallel region on idle ones (a futex wake-up on this VM).
//
// The count is process-wide, like OpenMP's and OpenBLAS's own settings. It is passed to
// every OpenMP region explicitly, so kernels called from any thread (not only the one
// that called set_num_threads) use it. Default: omp_get_max_threads() (OMP_NUM_THREADS,
// else the number of cores). Changing it while a kernel runs is not supported. A kernel
// called from inside the caller's own OpenMP team runs on that one thread.
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
