// What etr-run follows of one running launch (elastic_driver.cc): the job's stderr on its
// way through, its exit, and an mpirun that does not end after its job failed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

#include "launcher/heartbeat_watch.h"
#include "launcher/hosts.h"
#include "launcher/job_process.h"
#include "launcher/mpirun_output.h"

namespace etr::launcher {

struct Watch {
  using Clock = std::chrono::steady_clock;
  explicit Watch(const JobProcess& job);
  pid_t pid;
  int stderr_fd;
  MpirunOutput output;
  Clock::time_point next_discovery;
  bool eof = false, reaped = false, started = false, stop_forwarded = false;
  bool resize_pending = false;
  int status = 0;
  std::string reason;  // why a resize is pending
  std::optional<Discovery> discovery;
  int stuck_signals = 0;  // signals end_stuck_mpirun() sent
  Clock::time_point reaped_at{};
};

// How long etr-run keeps reading the job's stderr after mpirun has exited: a daemon that
// mpirun left behind (on a host it could not reach) may hold the pipe open for good.
inline constexpr std::chrono::seconds kDrainAfterExit{2};

// Passes on what the job wrote to stderr (100 ms at most), reaps it when it exits (and
// stops reading kDrainAfterExit later), and forwards a stop signal (`stop_signal` != 0)
// to it once.
void pump(Watch& w, int stop_signal);

// How long mpirun may take to end a job after a rank's error (or a lost daemon) before
// etr-run ends it: mpirun cannot reach the daemon of a host cut off by a partition to
// kill its ranks, and waits for it for as long as TCP does.
inline constexpr std::chrono::seconds kStuckMpirunGrace{10};

// Once `first_error` (a time point, epoch: none) is kStuckMpirunGrace past and mpirun
// still runs: SIGTERM, and SIGKILL 3 s later; says so on stderr.
void end_stuck_mpirun(Watch& w, std::chrono::steady_clock::time_point first_error);

// A rank whose heartbeat fell silent (heartbeat_watch.h): ends it with SIGKILL when it
// runs on this machine (mpirun then ends the job as after a kill -9). One on another
// machine is only returned: ending mpirun there would have it report this machine's ranks
// as killed and blame the wrong host, so the collectives' timeout and the probe of the
// hosts (host_probe.h) still decide (a later step: end it and probe at once). Returns the
// silent rank, or nullopt.
std::optional<HeartbeatWatch::Silent> end_silent_rank(Watch& w, HeartbeatWatch& heartbeats);

}  // namespace etr::launcher
