// etr-run: the elastic launcher (README.md, "Elastic training with etr-run").
//
//   etr-run [--np N] --min-np A --max-np B (--hosts h1:2,h2:2 | --hostfile F |
//           --host-discovery-script S) [--max-restarts R] [--blacklist-after K]
//           [--checkpoint-dir D] [--iface NET] [--launch-agent CMD] -- etr-train ...
//
// Launches the job with mpirun on the slots it has, streams its output, and keeps it
// alive: a failed job is relaunched from its newest checkpoint on the healthy slots; when
// discovery reports more (or fewer) slots the job is asked to resize at a step boundary.
// Exits with the job's final status.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/config/settings.h"
#include "runtime/error.h"
#include "launcher/elastic_driver.h"
#include "launcher/launch_shim.h"
#include "launcher/mpirun_flags.h"
#include "launcher/srun_launch.h"
#include "runtime/error_text.h"
#include "runtime/env.h"

namespace {

// The flags that are not RunOptions fields as they are given.
struct Flags {
  std::string hosts, hostfile, script;
  double cooldown_s = 600, min_np_timeout_s = 600, interval_s = 1, discovery_timeout_s = 10;
  double stop_timeout_s = 120;
  std::string heartbeat_timeout = "auto";
  double heartbeat_floor_s = 1;
  double stuck_after = 10, stuck_floor_s = 10, stuck_allowance_s = 300;
  bool cooldown_given = false;
};

void add_options(CLI::App& app, etr::launcher::RunOptions& o, Flags& f) {
  app.add_option("--np,-n", o.np, "Ranks of the first launch (default: every usable slot, up to --max-np)");
  app.add_option("--min-np", o.min_np, "Fewest ranks the job may run on; with fewer usable slots "
                 "etr-run waits (--min-np-timeout), then gives up (default 1)");
  app.add_option("--max-np", o.max_np, "Most ranks the job may grow to (default: every usable slot)");
  app.add_option("--pp", o.pp, "The job's pipeline stages: every launch runs whole pipelines, a "
                 "multiple of this many ranks (default: the job's parallel.pp=N argument, else 1)");
  auto* list = app.add_option("--hosts,-H", f.hosts, "Fixed hosts and slots, e.g. h1:2,h2:2 (a host "
                           "without :N has one slot)");
  auto* file = app.add_option("--hostfile", f.hostfile, "File of hosts, one per line as HOST, HOST:N or "
                           "HOST slots=N ('#' comments); re-read at every discovery");
  auto* script = app.add_option("--host-discovery-script", f.script, "Executable printing the usable hosts "
                           "in the hostfile syntax; run every --discovery-interval");
  list->excludes(file, script);
  file->excludes(script);
  app.add_option("--max-restarts", o.max_restarts, "Relaunches after failures before etr-run gives up "
                 "(resizes do not count; default 5)");
  app.add_option("--blacklist-after", o.blacklist_after, "Failures of one host before it is excluded "
                 "for --blacklist-cooldown (0: never; default 3)");
  app.add_option("--blacklist-cooldown", f.cooldown_s, "Seconds an excluded host stays excluded "
                 "(default 600; with --launcher srun, the rest of the allocation)")
      ->each([&f](const std::string&) { f.cooldown_given = true; });
  app.add_option("--min-np-timeout", f.min_np_timeout_s, "Seconds to wait for --min-np usable slots "
                 "before giving up (default 600)");
  app.add_option("--stop-timeout", f.stop_timeout_s, "On SIGINT, SIGTERM or SIGHUP, seconds the "
                 "job may take to save its step and stop before it is ended (a second signal ends "
                 "it at once; 0: at once; default 120)");
  app.add_option("--discovery-interval", f.interval_s, "Seconds between host discoveries (default 1)");
  app.add_option("--discovery-timeout", f.discovery_timeout_s, "Seconds a discovery script may run; "
                 "then it and every process it started are ended and the discovery counts as "
                 "failed (never longer than what is left of --min-np-timeout; default 10)");
  app.add_option("--heartbeat-timeout", f.heartbeat_timeout, "How long a rank's heartbeat (a UDP "
                 "datagram every 50 ms from a thread of its own) may be silent before etr-run "
                 "declares it failed and relaunches the job: a stopped or frozen worker. A rank "
                 "on this machine is killed; when every rank of another host is silent, the host "
                 "is excluded as unreachable unless it still answers the launch agent (a frozen "
                 "rank). 'auto' (the default) learns it: 4 x the 99.9th percentile of the gaps "
                 "between each rank's beats over the run, at least --heartbeat-floor, at most 30 "
                 "s; 3 s until 400 gaps were seen; for a rank while every other rank's beats "
                 "say it is blocked waiting on its peers (the job is stalled on the silent "
                 "one), 2.5 x that percentile (at least 0.125 s; half the timeout until "
                 "learned). Seconds: that timeout, fixed, for both; 0: off, and the progress "
                 "watchdog with it");
  app.add_option("--heartbeat-floor", f.heartbeat_floor_s, "Seconds: the shortest heartbeat timeout "
                 "'auto' may learn (default 1)");
  app.add_option("--stuck-after", f.stuck_after, "The progress watchdog: a job none of whose ranks "
                 "changed step or stage (the heartbeats carry both) for this many times its recent "
                 "step time, and at least --stuck-floor, is declared stuck, ended and relaunched, "
                 "naming the step and stage (0: off; default 10)");
  app.add_option("--stuck-floor", f.stuck_floor_s, "Seconds: the least time without progress "
                 "that counts as stuck (default 10)");
  app.add_option("--stuck-allowance", f.stuck_allowance_s, "Seconds without progress allowed while "
                 "a rank starts up, restores, evaluates or saves a checkpoint, and before a "
                 "launch's first step (default 300)");
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "The job's checkpoint directory (passed to "
                 "the job as ETR_RUN_CHECKPOINT_DIR; etr-train uses it as checkpoint.dir)");
  app.add_option("--run-dir", o.run_dir, "Keep etr-run's run directory (its events file: every "
                 "launch, exit, resize and the job's progress) here (default: a temporary one)");
  app.add_option("--mpirun", o.mpirun, "The mpirun to use (default: the one etr was built with)");
  app.add_option("--launcher", o.launcher, "How each launch starts the ranks: mpirun, or srun (a job "
                 "step of the Slurm allocation etr-run runs in, srun --mpi=pmix, on the allocation's "
                 "usable nodes, found with scontrol and sinfo unless a host option is given; a node "
                 "that fails is left out and taken back when Slurm has it in service again) "
                 "(default: srun inside an allocation, SLURM_JOB_ID set; else mpirun)")
      ->check(CLI::IsMember({"mpirun", "srun"}));
  app.add_option("--srun", o.srun, "The srun to use with --launcher srun (default: srun on PATH)");
  app.add_option("--srun-arg", o.srun_args, "An extra argument for srun (repeatable), e.g. "
                 "--srun-arg=--cpu-bind=none")
      ->allow_extra_args(false);
  app.add_option("--iface", o.iface, "The network between hosts for MPI's TCP traffic: networks in "
                 "CIDR form or interface names, comma-separated (default: ETR_MPI_IFACE, else the "
                 "subnet this machine routes to the first remote host through); unused when every "
                 "host is this machine (shared memory, loopback)");
  app.add_option("--launch-agent", o.launch_agent, "The command mpirun starts its daemon on a remote "
                 "host with, given HOST COMMAND (default: ssh); etr-run runs it through its launch "
                 "shim, which names a host whose daemon ends abnormally");
  app.add_option("--mpi-arg", o.mpi_args, "An extra argument for mpirun (repeatable), e.g. "
                 "--mpi-arg=--bind-to --mpi-arg=none")
      ->allow_extra_args(false);  // one word each, so that "--" still starts the command
  app.add_option("command", o.command, "The job and its arguments, after --")->required();
  app.footer(
      "Environment: the job gets ETR_RUN_* variables (runtime/elastic.h) and every ETR_* and\n"
      "OMP_* variable of etr-run's. A stopped or frozen worker is found by its silent heartbeat\n"
      "(--heartbeat-timeout), a job that stands still by the progress watchdog (--stuck-*);\n"
      "the collectives' timeout, ETR_COMM_TIMEOUT_S (default 300 s), stays the last line.\n"
      "Exit status: the job's final status; 1 when there were too few slots for too long, when\n"
      "the first host discovery fails, or when the job's program cannot be started; 2 for a\n"
      "usage error.");
}

// --heartbeat-timeout auto|S and --heartbeat-floor into o.heartbeat (heartbeat_timeout.h).
template <typename Ms>
void set_heartbeat(etr::launcher::RunOptions& o, const Flags& f, Ms ms) {
  o.heartbeat.floor = ms(f.heartbeat_floor_s, "--heartbeat-floor");
  if (o.heartbeat.floor > o.heartbeat.ceiling) {
    throw etr::ConfigError("--heartbeat-floor must be at most 30 s, the learned timeout's ceiling");
  }
  if (f.heartbeat_timeout == "auto") return;
  double s = -1;
  size_t used = 0;
  try {
    s = std::stod(f.heartbeat_timeout, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != f.heartbeat_timeout.size() || !(s >= 0 && s <= 1e9)) {
    throw etr::ConfigError("--heartbeat-timeout must be 'auto' or a number of seconds in [0, 1e9] (0: off), not '" +
                           f.heartbeat_timeout + "'");
  }
  o.heartbeats = s > 0;
  if (o.heartbeats) o.heartbeat.fixed = ms(s, "--heartbeat-timeout");
}

// Checks the options and runs the job; throws etr::Error.
int run(etr::launcher::RunOptions& o, const Flags& f) {
  using etr::launcher::HostSource;
  if (!f.hosts.empty()) o.hosts.emplace(HostSource::Kind::kList, f.hosts);
  if (!f.hostfile.empty()) o.hosts.emplace(HostSource::Kind::kFile, f.hostfile);
  if (!f.script.empty()) o.hosts.emplace(HostSource::Kind::kScript, f.script);
  auto ms = [](double s, const char* flag) {
    if (!(s > 0 && s <= 1e9)) {  // NaN and inf too
      throw etr::ConfigError(std::string(flag) + " must be a positive number of seconds, at most 1e9");
    }
    return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(s * 1000)));
  };
  o.blacklist_cooldown = ms(f.cooldown_s, "--blacklist-cooldown");
  o.min_np_timeout = ms(f.min_np_timeout_s, "--min-np-timeout");
  o.discovery_interval = ms(f.interval_s, "--discovery-interval");
  o.discovery_timeout = ms(f.discovery_timeout_s, "--discovery-timeout");
  if (!(f.stop_timeout_s >= 0 && f.stop_timeout_s <= 1e9)) {
    throw etr::ConfigError(
        "--stop-timeout must be a number of seconds in [0, 1e9] (0: end the job at once)");
  }
  o.stop_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.stop_timeout_s * 1000));
  set_heartbeat(o, f, ms);
  if (!(f.stuck_after >= 0 && f.stuck_after <= 1e6)) {
    throw etr::ConfigError("--stuck-after must be a multiple of the step time in [0, 1e6] (0: off)");
  }
  o.progress.multiple = f.stuck_after;
  o.progress.floor = ms(f.stuck_floor_s, "--stuck-floor");
  o.progress.allowance = ms(f.stuck_allowance_s, "--stuck-allowance");
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  etr::launcher::validate(o, ec ? std::string("etr-run") : self.string());
  // Inside an allocation a node that failed --blacklist-after times stays out for the rest
  // of the allocation, unless --blacklist-cooldown says otherwise.
  if (o.use_srun() && !f.cooldown_given) o.blacklist_cooldown = std::chrono::hours(24 * 365);
  if (o.hosts->kind() == HostSource::Kind::kList) {  // a bad or too short list fails now
    const int slots = etr::launcher::total_slots(o.hosts->discover());
    if (slots < o.min_np) {
      throw etr::ConfigError("--hosts gives " + std::to_string(slots) + " slot(s), fewer than --min-np " +
                             std::to_string(o.min_np) + ", and a fixed list never grows; list more slots");
    }
  }
  // The job inherits the environment: say which settings it carries (runtime/config/settings.h).
  // (On stdout: stderr carries etr-run's errors, one sentence each.)
  std::printf("etr-run: %s\n", etr::env_settings_line().c_str());
  std::printf("etr-run: %s\n", etr::env_in_effect_line().c_str());
  std::fflush(stdout);
  return etr::launcher::run_elastic(o);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == etr::launcher::kLaunchShimFlag) {  // launch_shim.h
    return etr::launcher::run_launch_shim(std::vector<std::string>(argv + 2, argv + argc));
  }
  if (argc > 1 && std::string(argv[1]) == etr::launcher::kSlurmNodesFlag) {  // srun_launch.h
    return etr::launcher::run_slurm_nodes();
  }
  if (argc > 1 && std::string(argv[1]) == etr::launcher::kMpirunFlagsFlag) {  // mpirun_flags.h
    return etr::launcher::run_mpirun_flags(std::vector<std::string>(argv + 2, argv + argc));
  }
  CLI::App app{"etr-run: runs an MPI training job elastically: relaunches it from its newest "
               "checkpoint when a worker fails and resizes it when slots come or go. SIGINT "
               "(Ctrl-C), SIGTERM or SIGHUP stops it once its step is saved (--stop-timeout).",
               "etr-run"};
  etr::launcher::RunOptions o;
  o.mpirun = ETR_MPIEXEC;
  Flags f;
  add_options(app, o, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is 0; a usage error 2, not CLI11's 10x
  }
  try {
    return run(o, f);
  } catch (const etr::Error& e) {
    etr::print_error("etr-run", e.what());
    return 1;
  } catch (const std::exception& e) {
    etr::print_error("etr-run", e.what(), "internal error");
    return 2;
  }
}
