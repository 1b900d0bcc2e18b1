// etr-run's settings (its flags, etr_run.cc), their checks, and what they turn into:
// the mpirun command line of a launch.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/hosts.h"
#include "launcher/network.h"
#include "launcher/heartbeat_timeout.h"
#include "launcher/progress_watch.h"

namespace etr::launcher {

struct RunOptions {
  int np = 0;      // ranks of the first launch (0: as many as there are slots, up to max_np)
  int min_np = 1;  // fewer usable slots than this: wait, then give up
  int max_np = 0;  // never more ranks than this (0: no limit but the usable slots)
  // The job's pipeline stages: every launch runs whole pipelines, a multiple of pp ranks
  // (a resize changes the replicas and keeps pp). 0: the job's "parallel.pp=N" argument
  // (as etr-train's --set takes it), else 1: a pipeline set in the job's config file
  // needs --pp. validate() rounds min_np up and max_np down to multiples of it and refuses
  // a --pp that disagrees with the job's argument.
  int pp = 0;
  std::optional<HostSource> hosts;
  int max_restarts = 5;     // relaunches after failures (resizes do not count)
  int blacklist_after = 3;  // failures before a host is excluded (0: never)
  std::chrono::milliseconds blacklist_cooldown = std::chrono::minutes(10);
  // A rank whose heartbeat (runtime/heartbeat.h) is silent for the timeout is declared
  // failed: fixed, or learned from the beats (heartbeat_timeout.h; the default).
  bool heartbeats = true;  // --heartbeat-timeout 0: off
  HeartbeatTimeoutOptions heartbeat;
  // The progress watchdog (progress_watch.h; needs the heartbeats): --stuck-after,
  // --stuck-floor, --stuck-allowance.
  ProgressLimits progress;
  std::chrono::milliseconds min_np_timeout = std::chrono::minutes(10);
  // After etr-run's first SIGINT, SIGTERM or SIGHUP, how long a job that has started may
  // take to save its step and stop (asked with SIGUSR2) before it is ended; 0: ended at
  // once (--stop-timeout).
  std::chrono::milliseconds stop_timeout = std::chrono::minutes(2);
  std::chrono::milliseconds discovery_interval = std::chrono::seconds(1);
  // A discovery script's time to finish (never more than what is left of min_np_timeout
  // while etr-run waits for slots).
  std::chrono::milliseconds discovery_timeout = kDefaultDiscoveryTimeout;
  std::string checkpoint_dir;         // exported as ETR_RUN_CHECKPOINT_DIR
  std::string run_dir;                // "" -> a temporary directory removed at the end
  std::string mpirun;                 // the mpirun executable
  // --launcher: how a launch starts the ranks: "mpirun", or "srun" (a job step of the Slurm
  // allocation etr-run runs in, srun_launch.h); "" -> srun inside an allocation, else mpirun.
  std::string launcher;
  std::string srun = "srun";          // --srun: the srun executable
  std::vector<std::string> srun_args;  // --srun-arg: extra srun arguments
  bool use_srun() const { return launcher == "srun"; }
  std::string iface;         // --iface: the network between hosts ("" -> ETR_MPI_IFACE, else the
                             // default route's subnet; network.h)
  std::string launch_agent;  // --launch-agent: how mpirun reaches a remote host, run through
                             // etr-run's launch shim (launch_shim.h); "" -> ssh
  std::vector<std::string> mpi_args;  // extra mpirun arguments
  std::vector<std::string> command;   // the job: program and arguments
};

// Throws ConfigError when the options do not fit together. Settles launcher (and, for
// srun without a host option, hosts: the allocation's nodes, discovered by `self`,
// etr-run's path).
void validate(RunOptions& o, const std::string& self = "etr-run");

// The most ranks of whole pipelines (a multiple of o.pp) within `slots` and o.max_np.
int whole_pipelines(const RunOptions& o, int slots);

// The mpirun command line for `np` ranks on `hosts` (flags this machine needs included),
// with the transports of `network` (choose_network() of the hosts, network.h). A
// parameter the extra mpirun arguments set with --mca is left to them.
std::vector<std::string> mpirun_command(const RunOptions& o, const std::vector<HostSlots>& hosts,
                                        int np, const std::vector<std::string>& env_names,
                                        const MpiNetwork& network);

// The network decision for a launch on `hosts` (choose_network() with o.iface); throws
// ConfigError (network.h).
MpiNetwork launch_network(const RunOptions& o, const std::vector<HostSlots>& hosts);

// Why `program` (the job's first word) cannot be started on this machine the way
// mpirun starts it: "" when it is an executable file, given as a path (relative to the
// working directory) or found on PATH or in the working directory, as Open MPI looks.
std::string program_problem(const std::string& program);

// program_problem() of the job when every host of `hosts` is this machine and mpirun
// looks for the program in the usual places (no -wdir, --path, --app or
// --preload-binary among the extra mpirun arguments); "" otherwise.
std::string local_program_problem(const RunOptions& o, const std::vector<HostSlots>& hosts);

// What stops a launch on `hosts`, as a sentence ("" when nothing): the job's program
// (local_program_problem()) or the network (launch_network(), which is left in `network`).
std::string launch_problem(const RunOptions& o, const std::vector<HostSlots>& hosts,
                           MpiNetwork& network);

}  // namespace etr::launcher
