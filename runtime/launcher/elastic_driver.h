// etr-run's loop (DESIGN.md, "Elasticity"): launch the job with mpirun on the slots it
// has; when the job fails, relaunch it from its newest checkpoint on the healthy slots;
// when discovery reports more (or fewer) slots, ask the job to resize and relaunch it at
// the new size. runtime/elastic.h is the job's side of the protocol.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "runtime/launcher/hosts.h"
#include "runtime/launcher/mpirun_output.h"  // killed_rank_in

namespace etr::launcher {

struct RunOptions {
  int np = 0;      // ranks of the first launch (0: as many as there are slots, up to max_np)
  int min_np = 1;  // fewer usable slots than this: wait, then give up
  int max_np = 0;  // never more ranks than this (0: no limit but the usable slots)
  std::optional<HostSource> hosts;
  int max_restarts = 5;  // relaunches after failures (resizes do not count)
  int blacklist_after = 3;  // failures before a host is excluded (0: never)
  std::chrono::milliseconds blacklist_cooldown = std::chrono::minutes(10);
  std::chrono::milliseconds min_np_timeout = std::chrono::minutes(10);
  std::chrono::milliseconds discovery_interval = std::chrono::seconds(1);
  std::string checkpoint_dir;  // exported as ETR_RUN_CHECKPOINT_DIR
  std::string run_dir;         // "" -> a temporary directory removed at the end
  std::string mpirun;          // the mpirun executable
  std::vector<std::string> mpi_args;  // extra mpirun arguments
  std::vector<std::string> command;   // the job: program and arguments
};

// Throws ConfigError when the options do not fit together.
void validate(RunOptions& o);

// The mpirun command line for `np` ranks on `hosts` (flags this machine needs included).
std::vector<std::string> mpirun_command(const RunOptions& o, const std::vector<HostSlots>& hosts,
                                        int np, const std::vector<std::string>& env_names);

// Runs the job to its end; returns etr-run's exit status (the job's final status, or 1
// when etr-run gives up for want of slots).
int run_elastic(const RunOptions& options);

}  // namespace etr::launcher
