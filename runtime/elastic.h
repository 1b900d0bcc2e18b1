// The job's side of elastic training (docs/design.md, "Elasticity"; docs/architecture.md,
// "Elasticity"). etr-run launches the job with mpirun and tells it, through environment
// variables, why and how it was launched; the job tells etr-run what it did through two
// files in the run directory. Any training program can use this; etr-train does.
//
// From etr-run (exported to every rank with mpirun -x):
//   ETR_RUN_DIR            the run directory; unset: not under etr-run (inactive)
//   ETR_RUN_RESTART        launches before this one (0 on the first)
//   ETR_RUN_REASON         start | failure | resize: why this launch happened
//   ETR_RUN_PREV_NP        the previous launch's world size (0 on the first)
//   ETR_RUN_LAST_STEP      the last step the previous launch completed (-1: unknown)
//   ETR_RUN_EVENT_MS       when etr-run saw the previous launch end (Unix ms)
//   ETR_RUN_HOSTS          this launch's hosts in rank order, "h1:2,h2:1": rank r runs on
//                          the host whose slots cover r
//   ETR_RUN_CHECKPOINT_DIR etr-run --checkpoint-dir (replaces checkpoint.dir when set)
// To etr-run (rank 0 writes, but a rank that fails writes its own "error" line):
//   <dir>/events    one line per event, "<unix ms> <event> key=value ...", appended
//   <dir>/progress  the last completed step, rewritten in place after every step
// A failing rank's line is "error rank=R own=0|1 [final=1]": own=1 when the rank's own
// error (a full disk, a bad file) may point at its host, which etr-run then charges;
// final=1 when a relaunch would fail the same way (a non-finite step), so etr-run stops.
// Resizing: etr-run sends SIGUSR1 to mpirun, which forwards it to every rank; the ranks
// agree at a step boundary, save a checkpoint and exit with kResizeExitCode.
// Stopping: SIGUSR2 (etr-run's stop on its own SIGINT, SIGTERM or SIGHUP, forwarded by
// mpirun or srun), or, not under etr-run, SIGTERM or SIGINT to any rank (a user, a
// scheduler): the ranks agree at a step boundary, save a durable checkpoint of that step
// and exit with 128 + the signal.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "runtime/heartbeat.h"

namespace etr {

// The exit status of a job that stopped to be relaunched at another size (EX_TEMPFAIL).
inline constexpr int kResizeExitCode = 75;

// Milliseconds since the Unix epoch (comparable across the processes of one machine).
int64_t unix_ms();

// "h1:2,h2:1" -> {{"h1", 2}, {"h2", 1}}; throws ConfigError on a malformed list.
std::vector<std::pair<std::string, int>> parse_host_slots(const std::string& text);

struct ElasticLaunch {
  bool active = false;  // launched by etr-run
  std::filesystem::path run_dir;
  int restart = 0;
  std::string reason = "start";
  int prev_world = 0;
  int64_t last_step = -1;
  int64_t event_ms = 0;
  std::vector<std::pair<std::string, int>> hosts;
  std::string checkpoint_dir;
  std::string heartbeat;  // "address:port" of etr-run's heartbeat socket ("" none)

  // Reads the ETR_RUN_* variables; throws ConfigError on a malformed value.
  static ElasticLaunch from_env();
  // The host `rank` runs on per `hosts` ("" when unknown).
  std::string host_of(int rank) const;
};

// Installs the SIGUSR1 handler that records a resize request. Call it first thing in
// main(), before MPI starts: an uncaught SIGUSR1 ends the process.
void install_resize_signal_handler();
// True once SIGUSR1 arrived and until clear_resize_request().
bool resize_requested();
void clear_resize_request();

// Installs the handler that records a stop request: SIGUSR2 and, with `term_and_int`,
// SIGTERM and SIGINT (caught once: after either, the next SIGTERM or SIGINT ends the
// process as it would without the handler; one ignored at the start stays ignored).
// Call it before MPI starts, as install_resize_signal_handler().
// Under etr-run only SIGUSR2: a SIGTERM to the ranks there is mpirun's or srun's teardown
// of a failed launch, which must end a rank blocked on a dead peer at once.
void install_stop_signal_handler(bool term_and_int = true);
// The first stop signal that arrived (SIGTERM, SIGINT or SIGUSR2); 0: none.
int stop_signal();
// `sig` is ignored (SIG_IGN) now: a process leaves such a signal ignored (SIGHUP under
// nohup, SIGINT for a shell script's background job) rather than catch it.
bool signal_ignored(int sig);
void clear_stop_request();  // for tests

// Rank 0's reports to etr-run; every call is a no-op when `launch` is inactive. Writes
// never throw: a report that cannot be written is not a reason to stop training.
class ElasticReporter {
 public:
  explicit ElasticReporter(ElasticLaunch launch);
  ~ElasticReporter();
  ElasticReporter(const ElasticReporter&) = delete;
  ElasticReporter& operator=(const ElasticReporter&) = delete;

  const ElasticLaunch& launch() const { return launch_; }
  bool active() const { return launch_.active; }
  // Appends "<unix ms> <text>" to <run dir>/events.
  void event(const std::string& text) const;
  // Rewrites <run dir>/progress with `step`.
  void progress(int64_t step);
  // Every rank: the heartbeat that carries this rank's position (may be null; not owned).
  void attach(Heartbeat* heartbeat) { heartbeat_ = heartbeat; }
  // Every rank: `step` steps done, the training thread now in `stage` (for etr-run's
  // progress watchdog, through the heartbeat; nothing without one).
  void position(int64_t step, RankStage stage) const {
    if (heartbeat_) heartbeat_->set_position(step, stage);
  }

 private:
  ElasticLaunch launch_;
  Heartbeat* heartbeat_ = nullptr;
  int progress_fd_ = -1;
};

}  // namespace etr
