// `etr-bench pipeline`: pipeline schedules side by side (bench/pipeline_bench.cc).
#pragma once

#include "bench/subcommand.h"

namespace etr::bench {

void add_pipeline_subcommand(CLI::App& app, SubcommandList& list);

}  // namespace etr::bench
