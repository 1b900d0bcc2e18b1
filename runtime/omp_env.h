// How long idle OpenMP threads spin, set before the OpenMP runtime starts.
//
// libgomp's threads spin ~300,000 iterations waiting for the next parallel region. On
// cores shared with another process (ranks beside their progress threads, a neighbour
// compiling) that spinning takes the core the other thread needs: measured here, a
// 2-thread layernorm went from 0.06 ms to 7.7 ms with one busy process on the other
// core, and to 0.66 ms with GOMP_SPINCOUNT=10000 (no cost on idle cores).
// OMP_WAIT_POLICY=passive costs ~50 us per region on idle cores.
// libgomp reads the variables when it loads, so a program that wants them must have
// them in its environment from the start: ensure_omp_spin_limit() re-executes the
// program once with GOMP_SPINCOUNT=10000 unless the user set GOMP_SPINCOUNT or
// OMP_WAIT_POLICY. Call it first thing in main(), before MPI or any thread starts.
#pragma once

namespace etr {

void ensure_omp_spin_limit(char** argv);

}  // namespace etr
