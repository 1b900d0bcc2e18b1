// etr-run's driver inside (elastic_driver.cc: waiting for slots, launching, watching a
// launch; launch_outcome.cc: what a finished launch means): not installed, not for other
// units. The entry point is elastic_driver.h.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/elastic_driver.h"
#include "launcher/failure_cause.h"
#include "launcher/heartbeat_watch.h"
#include "launcher/hosts.h"
#include "launcher/job_events.h"
#include "launcher/job_process.h"
#include "launcher/launch_watch.h"
#include "launcher/network.h"
#include "launcher/oom_watch.h"
#include "launcher/progress_watch.h"
#include "runtime/elastic.h"
#include "runtime/error.h"

namespace etr::launcher {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// Signals within this time of etr-run's first stop signal are the same request.
inline constexpr std::chrono::seconds kStopSameRequest{1};

// The stop signal etr-run caught (0: none), passed to pump() (launch_watch.h).
extern volatile sig_atomic_t g_stop_signal;
extern volatile sig_atomic_t g_stop_signals;  // how many arrived

template <typename... Args>
void say(const Args&... args) {
  std::ostringstream s;
  s << "etr-run: ";
  (s << ... << args);
  s << '\n';
  const std::string text = s.str();
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, text.data(), text.size());
}

inline std::string seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f s", s);
  return b;
}

inline double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What one launch of the job did.
struct LaunchResult {
  int status = 0;          // exit status (128 + signal when mpirun was killed)
  FailureEvidence evidence;  // whom to blame (failure_cause.h)
  Clock::time_point first_error{};  // the first error or lost daemon heard of (else epoch)
  bool final_error = false;  // the job's "error ... final=1": a relaunch would fail alike
  bool resize_requested = false;
  // The job's "stop-exit step=N saved=1", or a resize's "resize-exit ..." (-1: none).
  int64_t saved_step = -1;
  bool first_step_seen = false;
  bool ready_seen = false;  // rank 0 got through its setup (config, model, restore)
  std::string program_error;  // mpirun could not start the program (MpirunOutput)
  int micro_batch = 0;  // the job's micro_batch=B event field (oom_watch.h), 0: none
  OomEvidence oom;      // the OOM kill count around the launch, mpirun's SIGKILL reports
  // The probe of a host whose ranks all fell silent, started when etr-run ended the launch
  // (runs while mpirun is ended): the host when it still answers the launch agent.
  std::shared_future<std::vector<std::string>> silent_probe;
};

// A job's "error rank=R own=0|1 [peer=P] [final=1]" event: the first rank that named
// itself the cause (own=1), the peers ranks timed out waiting on, and whether a relaunch
// would fail the same way (final=1); the launch shim's "daemon-lost host=H". Any event's
// micro_batch=B: the micro-batch the job runs at (oom_watch.h).
void note_error(const Event& e, LaunchResult& r);

// The job's environment on top of etr-run's: the ETR_RUN_* variables of runtime/elastic.h.
struct LaunchEnv {
  int restart = 0;
  std::string reason = "start";
  int prev_np = 0;
  int64_t last_step = -1;
  int64_t event_ms = 0;
  int memory_halvings = 0;  // relaunches after an OOM kill (oom_watch.h)
};

// "--heartbeat-timeout 3.00 s", "--heartbeat-timeout auto: 1.20 s": the timeout in force.
std::string timeout_words(const HeartbeatWatch& h);
// "0.58 s while every other rank waited on its peers (--heartbeat-timeout auto: 1.12 s;
// 0.56 s for a stalled job)", or "1.20 s (--heartbeat-timeout auto: 1.20 s)".
std::string silence_words(const HeartbeatWatch::Silent& s, const HeartbeatWatch& h);

class Driver {
 public:
  explicit Driver(const RunOptions& o)
      : o_(o), health_(o.blacklist_after, o.blacklist_cooldown) {
    if (o.heartbeats) heartbeats_.emplace(o.heartbeat);
    if (heartbeats_ && o.progress.on()) progress_.emplace(o.progress);
  }

  int run();

 private:
  // The discovered hosts without the excluded ones; nullopt (warned once in a row, after
  // a first discovery that worked) when discovery fails. A script has `timeout` and is
  // ended when etr-run is stopped.
  std::optional<std::vector<HostSlots>> discover_usable(std::chrono::milliseconds timeout);
  std::optional<std::vector<HostSlots>> accept_discovery(const std::vector<HostSlots>& hosts);
  std::optional<std::vector<HostSlots>> discovery_failed(const Error& e);
  // The end of a discovery started while the job runs (as discover_usable()).
  std::optional<std::vector<HostSlots>> finish_discovery(const Discovery& d);
  // Waits until at least min_np slots are usable; nullopt when it gave up (or was
  // stopped). A first discovery that fails is an error at once: nothing was ever usable.
  std::optional<std::vector<HostSlots>> wait_for_slots();
  LaunchResult launch(const std::vector<HostSlots>& hosts, int np, const LaunchEnv& env);
  // The launch's command line: mpirun's, or a job step's (srun_launch.h: its additions to
  // the environment go into `env`).
  std::vector<std::string> job_command(const std::vector<HostSlots>& hosts, int np,
                                       JobEnvironment& env) const;
  // How long launch()'s loop may wait for the job's output or exit (launch_watch.h): until
  // the next thing due, a beat's arrival or 100 ms.
  PumpWake wake_for(const Watch& w, const LaunchResult& r) const;
  // The pieces of launch()'s loop: the job's events, discovery while it runs.
  void read_events(Watch& w, LaunchResult& r, const LaunchEnv& env, int np);
  void watch_discovery(Watch& w, const std::vector<HostSlots>& hosts, int np, LaunchResult& r);
  // Silent ranks and the progress watchdog (launch_heartbeats.cc).
  void watch_heartbeats(Watch& w, LaunchResult& r, const std::vector<HostSlots>& assigned);
  // `silent`: the host every rank of which is silent (silent_host), else null.
  void remote_silence(Watch& w, LaunchResult& r, const std::vector<HostSlots>& assigned,
                      const HostSlots* silent);
  void watch_progress(Watch& w, LaunchResult& r);
  // After a stop signal: asks a job that has started to save its step and stop (SIGUSR2,
  // once); on a second signal or after --stop-timeout, decides to end the launch
  // (w.end_at: end_stuck_mpirun's SIGTERM, then SIGKILL). Returns the signal for pump()
  // to forward to mpirun when the job is ended at once (not started yet, or
  // --stop-timeout 0), else 0.
  int watch_stop(Watch& w);
  // A stop signal after the first request, and not within kStopSameRequest of it.
  bool stop_again();
  // etr-run's line (and event) when the learned heartbeat timeout is first known, and
  // when it moves by a quarter or more.
  void say_heartbeat_timeout();
  // After a launch that did not complete: the exit status to end with, or nullopt to
  // relaunch (env, counts updated).
  std::optional<int> after_launch(const LaunchResult& r, const std::vector<HostSlots>& assigned,
                                  int64_t last_step, LaunchEnv& env);
  // A failed launch: names the culprit, may exclude its host; true to give up.
  bool after_failure(const LaunchResult& r, const std::vector<HostSlots>& assigned,
                     int64_t last_step);
  // A launch a rank of which the OOM killer ended: the exit status, or nullopt to
  // relaunch with the micro-batch halved once more.
  std::optional<int> after_oom(const OomKill& k, const LaunchResult& r, LaunchEnv& env);
  void prepare_run_dir();
  // --launch-agent (else ssh) through etr-run's launch shim.
  std::string shim_agent() const;
  // After a launch that ended in timeouts only, the remote hosts the agent cannot reach;
  // after a silent host, whether the agent still reaches it (r.silent_probe's answer).
  void probe_hosts(FailureEvidence& e, const LaunchResult& r,
                   const std::vector<HostSlots>& assigned) const;
  // The words that run a command on a host the way mpirun reaches it (host_probe.h).
  std::vector<std::string> probe_agent() const;
  // While a launch runs: every kReprobeInterval, the hosts excluded as unreachable are
  // asked again (in the background); one that answers is admitted, so the discovery that
  // still lists it (a partition shorter than the scheduler's notice) grows the job back.
  void reprobe_unreachable();
  std::shared_future<std::vector<std::string>> reprobe_;  // the hosts that answered
  Clock::time_point next_reprobe_{};
  // The stop: when etr-run first saw a stop signal, and how many it counts as that first
  // request (those within kStopSameRequest of it: one Ctrl-C often arrives through two
  // paths, the terminal's process group and a wrapper script's trap).
  Clock::time_point stop_first_{};
  int stop_counted_ = 0;

  const RunOptions& o_;
  HostHealth health_;
  fs::path run_dir_;
  std::optional<EventTail> events_;
  std::optional<ElasticReporter> events_out_;  // etr-run's own lines of the events file
  bool discovery_warned_ = false;
  bool discovered_once_ = false;
  std::string discovery_error_;  // the last discovery's error ("" after one that worked)
  std::optional<HeartbeatWatch> heartbeats_;  // --heartbeat-timeout > 0
  std::optional<ProgressWatch> progress_;     // and --stuck-after > 0
  std::chrono::milliseconds said_timeout_{0};  // the learned timeout last said
  MpiNetwork network_;  // the transports of the launch (network.h); said_: its line, once
  std::string said_;
  int launches_ = 0, failures_ = 0, resizes_ = 0, oom_kills_ = 0;
  std::vector<HostSlots> previous_;  // the last launch's hosts (take_slots keeps them first)
};

}  // namespace etr::launcher
