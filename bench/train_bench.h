// `etr-bench train`: training throughput of the example GPT-2 on one rank at 1 and 2
// threads, beside OpenBLAS's sgemm throughput measured in the same run (the ceiling a
// CPU trainer made of matrix products approaches). bench/compare_pytorch.sh puts these
// figures beside PyTorch training the identical model.
#pragma once

#include "bench/subcommand.h"

namespace etr::bench {

void add_train_subcommand(CLI::App& app, SubcommandList& list);

}  // namespace etr::bench
