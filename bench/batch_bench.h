// `etr-bench batch`: the batch policy (memory model, automatic micro-batch, throughput
// shares, gradient noise scale) beside references measured in the same run
// (bench/batch_bench.cc).
#pragma once

#include "bench/subcommand.h"

namespace etr::bench {

void add_batch_subcommand(CLI::App& app, SubcommandList& list);

}  // namespace etr::bench
