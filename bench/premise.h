// The premise of a benchmark row, measured: how many cores its process kept busy over the
// timed region (process CPU time / wall time) and which CPUs its threads were allowed to
// run on, against what the row claims ("1 thread": one core of its own). A row whose
// premise does not hold prints a marker instead of its figure, and etr-bench exits 1.
//
//   CpuMeter meter;                      // the timed region starts
//   ... run it ...
//   CpuUse use = meter.stop();           // wall, CPU, the threads' CPUs
//   std::string why = premise_failure({.threads = 1, .pinned = true}, use);
//   print(why.empty() ? figure : refused_cell(why));
//
// Why three measures: the affinity says where the threads may run, CPU / wall how many
// cores they actually kept busy, the run-queue wait whether they had those cores to
// themselves. A 1-thread row that is not pinned can use two cores (the kernels sized
// elsewhere: measured 1.55 cores busy on "1 thread"), which CPU / wall shows; a pinned
// row cannot exceed its CPUs, but other work on them (a compiler on the same 2-core
// machine: a pinned 1-thread row waited 52 % of its time) shows only as waiting.
#pragma once

#include <string>
#include <vector>

#include "runtime/cpu_affinity.h"

namespace etr::bench {

// One process over one timed region.
struct CpuUse {
  double wall_seconds = 0;
  double cpu_seconds = 0;  // user + system time of every thread of the process
  // Time its threads were ready to run but waited for a CPU (the kernel's run-queue
  // delay, /proc/self/task/*/schedstat): other work on the same cores. < 0: unknown.
  double wait_seconds = 0;
  // CPU time other processes (and the hypervisor's steal) took on `cpus` over the
  // region: their busy time in /proc/stat (10 ms ticks) minus this process's. < 0: unknown.
  double others_seconds = -1;
  CpuList cpus;  // the union of the affinities of the process's threads, at the end

  // CPU / wall: the cores kept busy on average (0 for an empty region).
  double cores_busy() const { return wall_seconds > 0 ? cpu_seconds / wall_seconds : 0; }
  // The cores other work kept busy on `cpus` on average (-1: unknown).
  double others_busy() const {
    return others_seconds < 0 || wall_seconds <= 0 ? -1 : others_seconds / wall_seconds;
  }
  // The fraction of `threads` threads' time spent waiting for a CPU (-1: unknown).
  double waiting(int threads) const {
    return wait_seconds < 0 || wall_seconds <= 0 ? -1 : wait_seconds / (wall_seconds * threads);
  }
};

// Measures a region of this process from construction (or restart) to stop(). CPU time
// from clock_gettime(CLOCK_PROCESS_CPUTIME_ID), wall time from CLOCK_MONOTONIC, waiting
// from the threads' schedstat (threads that end within the region take theirs along).
class CpuMeter {
 public:
  CpuMeter() { restart(); }
  void restart();
  CpuUse stop() const;

 private:
  double wall0_ = 0, cpu0_ = 0, wait0_ = 0;
  std::vector<double> busy0_;  // [CPU number] busy seconds of every CPU, /proc/stat
};

// Adds region `u` to `into` (for a figure timed in pieces); an unknown stays unknown, so
// start from CpuUse{.others_seconds = 0}.
void accumulate(CpuUse& into, const CpuUse& u);

// What a row claims about one process (one rank).
struct Premise {
  int threads = 1;  // compute threads, each on a core of its own
  // The threads are pinned: the process may run on exactly `threads` CPUs. When false,
  // a wider affinity is accepted and only CPU / wall must stay within the claim.
  bool pinned = false;
  // CPU / wall may exceed `threads` by this factor (helper threads: MPI's, etr's
  // progress engine, the data loader) before the row is refused.
  double tolerance = 1.15;
  // The claimed threads may wait for a CPU this fraction of their time at most before
  // the row is refused as run on shared cores; < 0: not checked (rows whose own threads
  // share a core by design, e.g. a rank's progress engine beside its compute thread).
  double max_waiting = 0.10;
  // Other processes may keep this many cores busy per claimed thread on the row's CPUs
  // (/proc/stat) before it is refused; < 0: not checked (rows whose CPUs are shared by
  // design, e.g. unbound ranks). Checked for regions of a second or more only: the
  // ticks are 10 ms.
  double max_others = -1;
};

// "" when `use` bears out `p`, else one phrase saying what does not, for the row's
// marker: "1.55 cores busy for 1 thread", "1 thread may run on 2 CPUs (0-1)",
// "2 threads on 1 CPU (0)", "other work kept 0.45 cores busy on its CPU (0)", "1 thread waited for
// a CPU 35% of the time (cores shared with other work)".
std::string premise_failure(const Premise& p, const CpuUse& use);

// The check across the ranks of one host, before or after running: ranks that claim
// their own cores must have as many CPUs between them. `cpus_of_rank` are the ranks'
// affinities (on one host), `threads` each rank's claim. "" when fine, else e.g.
// "3 ranks x 1 thread share 2 CPUs (0-1)".
std::string shared_cores_failure(const std::vector<CpuList>& cpus_of_rank, int threads);

// The verdict on a row run by several ranks: `uses[r]` measured on rank r, `hosts[r]` its
// host. Each rank against `p`, then the ranks of each host against their CPUs together.
// "" when fine, else "rank 1: 1.55 cores busy for 1 thread" or "on host h: 3 ranks x 1
// thread share 2 CPUs (0-1)" (no "rank 0: " for a single rank).
std::string ranks_premise_failure(const Premise& p, const std::vector<CpuUse>& uses,
                                  const std::vector<std::string>& hosts);

// The cell that replaces a refused figure: "premise failed: <why>".
std::string refused_cell(const std::string& why);

// The CPUs the threads of this process may run on: the union of every thread's
// affinity (/proc/self/task), so a pool thread that kept a wider affinity shows.
CpuList process_cpus();

// Pins every thread of this process to `cpus` while it lives (threads created meanwhile
// inherit it from their creator), then restores every thread to the affinity the
// calling thread had. Throws ConfigError when `cpus` is not allowed here.
class ScopedProcessAffinity {
 public:
  explicit ScopedProcessAffinity(const CpuList& cpus);
  ~ScopedProcessAffinity();
  ScopedProcessAffinity(const ScopedProcessAffinity&) = delete;
  ScopedProcessAffinity& operator=(const ScopedProcessAffinity&) = delete;

 private:
  CpuList saved_;
};

// Busy seconds (all but idle and iowait) of every CPU since boot, indexed by CPU number,
// from /proc/stat; empty when it cannot be read.
std::vector<double> cpu_busy_seconds();

// The run-queue delay of every thread of this process so far, in seconds; -1 when the
// kernel does not keep it.
double threads_wait_seconds();

// Every thread of this process to `cpus`; false when the system refuses one.
bool set_process_cpus(const CpuList& cpus);

}  // namespace etr::bench
