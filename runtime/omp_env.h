// Environment the threading libraries read when they load, set before they start.
//
// libgomp's threads spin ~300,000 iterations waiting for the next parallel region. On
// cores shared with another process (ranks beside their progress threads, a neighbour
// compiling) that spinning takes the core the other thread needs: measured here, a
// 2-thread layernorm went from 0.06 ms to 7.7 ms with one busy process on the other
// core, and to 0.66 ms with GOMP_SPINCOUNT=10000 (no cost on idle cores).
// OMP_WAIT_POLICY=passive costs ~50 us per region on idle cores.
//
// OpenBLAS 0.3.21 (Debian 12) picks its kernels by CPU model and falls back to its
// generic "Prescott" (SSE3) kernels on a model it does not know, such as a virtual
// "Intel(R) Xeon(R) Processor" with AVX-512: measured there, one core's sgemm ran at
// 32 GFLOP/s instead of 113 with OPENBLAS_CORETYPE=SkylakeX, and etr-bench train at 1,442
// instead of 4,320 tokens/s. OPENBLAS_CORETYPE names the kernels to use instead.
//
// OpenBLAS's pthread build starts its threads when it loads, and each spins (yielding)
// for 2^OPENBLAS_THREAD_TIMEOUT cycles, 2^28 by default (~0.1 s), before it sleeps: at
// every process start, and after every BLAS call. A rank held to part of a CPU (a cgroup
// quota, as on the chaos soak's hosts) lost that much of its share at each start: its
// MPI_Init took 110-120 ms instead of 50-55 (measured with OpenBLAS preloaded into a
// bare MPI program, 3 ranks of 0.6 CPU). 2^20 cycles (~0.4 ms) still spans the gaps between
// one step's BLAS calls.
//
// Both libraries read their variables when they load, so a program that wants them must
// have them in its environment from the start: ensure_omp_spin_limit() re-executes the
// program once with GOMP_SPINCOUNT=10000 (unless the user set GOMP_SPINCOUNT or
// OMP_WAIT_POLICY), OPENBLAS_THREAD_TIMEOUT=20 (unless the user set it) and, when
// OpenBLAS fell back to Prescott on a CPU with AVX-512 or AVX2 (unless the user set
// OPENBLAS_CORETYPE), with the matching OPENBLAS_CORETYPE. Call it first thing in main(),
// before MPI or any thread starts. etr-run puts the two spin limits in every launch's
// environment itself (launcher/job_process.h), so its ranks start once.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

namespace etr {

// The spin limits this process's environment lacks, as (name, value): GOMP_SPINCOUNT=10000
// unless GOMP_SPINCOUNT or OMP_WAIT_POLICY is set (GOMP_SPINCOUNT would override the
// user's policy), OPENBLAS_THREAD_TIMEOUT=20 unless it is set. For
// ensure_omp_spin_limit() and etr-run's job environment alike.
std::vector<std::pair<const char*, const char*>> missing_spin_limits();

void ensure_omp_spin_limit(char** argv);

// The OPENBLAS_CORETYPE to use when OpenBLAS chose the kernels `corename` on a CPU with
// the given features: "SkylakeX" (AVX-512 F/BW/DQ/VL) or "Haswell" (AVX2 + FMA) instead of
// the generic "Prescott"; nullptr to keep OpenBLAS's choice.
const char* openblas_coretype_for(std::string_view corename, bool avx512, bool avx2_fma);

}  // namespace etr
