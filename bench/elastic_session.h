// ElasticSession: one etr-run session (launcher/) driven by `etr-bench elastic`
// (bench/elastic_bench.h) as a child process: started with the MPI variables scrubbed from
// its environment, its slots offered by a discovery script that prints a file the bench
// rewrites, its progress read from the run directory's events and progress files
// (runtime/elastic.h), its ranks found (to kill one) through their environment, every wait
// bounded by a timeout, and etr-run and whatever is left of the job ended at the end.
//
// Layout of the session's directory `dir` (made by the caller):
//   dir/discover.sh  the discovery script: prints dir/slots
//   dir/slots        "localhost:<n>" (on simulated hosts: "198.18.0.I:1" for I = 1..n),
//                    replaced atomically by set_slots()
//   dir/etr-run.log  etr-run's stdout and stderr (and so the job's)
//   dir/run/         etr-run's run directory: events, progress
//   dir/ckpt/        the job's checkpoints (etr-run --checkpoint-dir)
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "launcher/job_events.h"

namespace etr::bench {

// One line of <run dir>/events: "<unix ms> <event> key=value ...", as etr-run reads it.
using Event = launcher::Event;

// The events of one launch: its "launch" line up to the next one (the job's events, then
// etr-run's resize-request and exit).
struct Launch {
  std::vector<Event> events;

  // The first event called `name`, or null.
  const Event* find(const std::string& name) const;
  // The same; throws etr::Error when there is none.
  const Event& at(const std::string& name) const;
  int64_t ms(const std::string& name) const { return at(name).ms; }
  // The integer field `key` of event `name`; throws etr::Error when either is missing.
  int64_t field(const std::string& name, const std::string& key) const;
};

// While alive, SIGINT, SIGTERM and SIGHUP set a flag instead of ending the process (a
// signal handler's only way to speak): every ElasticSession::wait then throws, and the
// session's destructor ends etr-run and the job, which run in their own process group and
// so do not get the terminal's Ctrl-C. The previous handlers come back at the end.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[3];
};

class ElasticSession {
 public:
  // etr-run --discovery-interval, seconds.
  static constexpr const char* kDiscoveryInterval = "0.2";

  struct Options {
    std::string etr_run, etr_train, config;  // the programs and the job's config file
    std::vector<std::string> sets;           // the job's --set overrides, in order
    int np = 2;             // the first launch's ranks; etr-run may grow the job to np + 1
    double timeout_s = 60;  // the longest any one wait may take
    // tests/cluster/sim_cluster.sh of a cluster that is up (ETR_CLUSTER_NAME in the
    // environment): etr-run runs on host 1 and reaches the others with its rsh; "": this
    // machine only.
    std::string cluster;
  };

  // Writes the discovery script and the slots file (np slots) and starts etr-run, the
  // leader of its own process group, with every online CPU. Throws IoError when the log
  // cannot be created, etr::Error when fork fails.
  ElasticSession(Options options, const std::filesystem::path& dir);
  // end(): etr-run and whatever of the job is left.
  ~ElasticSession() { end(); }
  ElasticSession(const ElasticSession&) = delete;
  ElasticSession& operator=(const ElasticSession&) = delete;

  // Replaces the slots file (atomically: the script never reads half of it); returns when
  // (Unix ms).
  int64_t set_slots(int n);

  // Simulated hosts only: host `host` (the last listed) lost, as a machine dies: every
  // process on it killed, its link cut, then discovery drops it; returns when (Unix ms).
  int64_t lose_host(int host);
  // Its link back and discovery listing it again; returns when (Unix ms).
  int64_t restore_host(int host);

  // Every launch so far, from the events file's whole lines.
  std::vector<Launch> launches() const;
  // The last step rank 0 completed in the current launch; -1 when none yet.
  int64_t progress() const;

  // Polls until `done`; throws etr::Error when etr-run exits first, on an interrupt (see
  // InterruptGuard) or after Options::timeout_s. `what` names the wait in the message.
  void wait(const std::string& what, const std::function<bool()>& done);
  // Waits for launch n (1-based) to complete its first step; returns every launch so far.
  std::vector<Launch> wait_first_step(size_t n, const std::string& what);
  // Waits until rank 0 has completed `step` (of the current launch); returns the step seen.
  int64_t wait_step(int64_t step);
  // The process of the job's rank `rank`; throws etr::Error unless there is exactly one.
  pid_t rank_pid(int rank) const;
  // Ends the session as a user would (SIGTERM: etr-run ends the job) and waits for it.
  void stop();

 private:
  void start(std::vector<std::string> argv);
  // Runs the cluster script with `args`; throws etr::Error when it fails.
  void cluster(const std::string& args) const;
  bool exited();
  std::string status() const;
  // SIGTERM to etr-run, SIGKILL to its group after 10 s, then to any rank or mpirun left.
  void end() noexcept;

  Options options_;
  std::filesystem::path dir_, run_dir_;
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

}  // namespace etr::bench
