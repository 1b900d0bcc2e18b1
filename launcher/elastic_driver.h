// etr-run's loop (docs/design.md, "Elasticity"): launch the job with mpirun on the slots it
// has; when the job fails, relaunch it from its newest checkpoint on the healthy slots;
// when discovery reports more (or fewer) slots, ask the job to resize and relaunch it at
// the new size. runtime/elastic.h is the job's side of the protocol.
#pragma once

#include "launcher/hosts.h"
#include "launcher/mpirun_output.h"  // killed_rank_in
#include "launcher/run_options.h"

namespace etr::launcher {

// Runs the job to its end; returns etr-run's exit status (the job's final status, or 1
// when etr-run gives up for want of slots).
int run_elastic(const RunOptions& options);

}  // namespace etr::launcher
