// `etr-bench elastic`: what elastic recovery and resizing cost under etr-run, beside a
// cold start of the same job and its steady step time, measured in the same run. Runs on
// one rank (no mpirun needed) and drives etr-run as a child process (ElasticSession,
// bench/elastic_session.h); bench/run_elastic.sh.
//
// Each round is a fresh etr-run session (launcher/) training the given config
// (default configs/demo.pbtxt) at --np ranks on localhost, discovering its slots every
// 0.2 s from a script that prints a file the bench rewrites, checkpointing every
// --checkpoint-every steps into an empty directory. In order, the round measures:
//   cold start     the first launch, nothing to resume: launch -> first step
//   steady step    ms/step over --checkpoint-every steps (one async save among them)
//   kill -9        of the last rank, midway between two checkpoints, until the first
//                  step of the relaunch: detection (-> etr-run saw mpirun exit),
//                  relaunch (-> the new ranks started), restore (-> model built and
//                  checkpoint read) and first step; steps lost (redone from the checkpoint)
//   join           the slots file grows by one slot, until the first step at np + 1:
//                  detection (-> etr-run's resize request), agree+save (-> the ranks
//                  stopped at a step boundary and saved), exit (-> mpirun exited), then
//                  relaunch, restore and first step as above
//   leave          the slots file shrinks back, until the first step at np
// Every time comes from the run directory's events file (runtime/elastic.h: Unix ms
// stamped by etr-run and by rank 0) and the bench's own stamps of the kill and of the
// slots file rewrites. The table gives medians over rounds and the best total.
#pragma once

#include "bench/subcommand.h"

namespace etr::bench {

void add_elastic_subcommand(CLI::App& app, SubcommandList& list);

}  // namespace etr::bench
