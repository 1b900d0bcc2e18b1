// `etr-bench dp`: data-parallel training throughput of the example GPT-2. In one run
// (mpirun -np 2; bench/run_dp.sh) it measures, in alternating rounds:
//   single        the same global batch on rank 0 alone (np = 1, one thread)
//   overlap on    both ranks, buckets reduced while backward runs (the default)
//   overlap off   both ranks, every bucket reduced after backward
// and prints tokens/s, ms/step, the gradient communication per step (the progress
// engine's busy time), the part of it the optimizer waited for (exposed), the hidden
// fraction 1 - exposed / comm, and the scaling efficiency tok/s(np) / (np x tok/s(1)).
#pragma once

#include "bench/subcommand.h"

namespace etr::bench {

void add_dp_subcommand(CLI::App& app, SubcommandList& list);

}  // namespace etr::bench
