// `etr-bench zero-grads`: ZeRO 2-3's gradient bytes per rank under accumulation, kept whole
// and reduced each micro-batch, beside the paper's 4 Psi / N (bench/zero_grads_bench.cc).
#pragma once

#include "bench/subcommand.h"

namespace etr::bench {

void add_zero_grads_subcommand(CLI::App& app, SubcommandList& list);

}  // namespace etr::bench
