// `etr-bench allreduce | reduce_scatter | allgather`: etr's HostCommunicator beside MPI's
// own collective on the same buffers, in the style of nccl-tests, with the machine's
// memory-traffic ceiling measured in the same run.
//
// For every size: both implementations are verified against each other once, warmed up,
// then timed `reps` times, etr and MPI interleaved per repetition so that both see the same
// noise. A repetition's time is the slowest rank's mean time per op; the table shows the
// median over repetitions.
#pragma once

#include "bench/subcommand.h"

namespace etr::bench {

// Registers the three collective subcommands on `app`.
void add_collective_subcommands(CLI::App& app, SubcommandList& list);

}  // namespace etr::bench
