// `etr-bench zero`: ZeRO stages 0-3 side by side (bench/zero_bench.cc).
#pragma once

#include "bench/subcommand.h"

namespace etr::bench {

void add_zero_subcommand(CLI::App& app, SubcommandList& list);

}  // namespace etr::bench
