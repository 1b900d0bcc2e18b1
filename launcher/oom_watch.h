// etr-run and the kernel's out-of-memory killer.
//
// A rank past its memory cgroup's limit (or a machine out of memory) is ended by the
// kernel with SIGKILL and leaves no message. etr-run reads the oom_kill count of its own
// memory cgroup, which the job's processes share (runtime/memory_budget.h; the machine's
// count in /proc/vmstat when there is no memory cgroup), before each launch and after the
// job fails. The count going up while mpirun reports a rank killed by signal 9 (or
// exiting 137, or mpirun itself killed) is an OOM kill: etr-run relaunches the job with
// ETR_RUN_MEMORY_HALVINGS=n (the n-th such relaunch; 0 before any), and the job halves its
// micro-batch n times and keeps its global batch. Either alone is not: `kill -9` of a
// rank also says signal 9, and another process of a shared cgroup may be the one killed.
//
// etr-run stops instead of relaunching once the micro-batch was halved kMaxMemoryHalvings
// times, or when the job said it ran at micro-batch 1: an event of the job (in
// <run dir>/events, runtime/elastic.h) with a field micro_batch=B, such as
// "ready step=40 micro_batch=1". A job that cannot halve further should also fail with
// "error rank=R own=0 final=1", which stops etr-run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "launcher/mpirun_output.h"

namespace etr::launcher {

// Halving the micro-batch more often than this (1/64 of it) is not worth a launch.
inline constexpr int kMaxMemoryHalvings = 6;

// The kernel's OOM kill count as etr-run sees it.
struct OomCount {
  uint64_t kills = 0;
  bool cgroup = true;  // of etr-run's memory cgroup; false: the machine's (/proc/vmstat)
};

// nullopt when neither count can be read.
std::optional<OomCount> read_oom_count();

// What a failed launch leaves to judge by.
struct OomEvidence {
  std::optional<OomCount> before, after;  // read_oom_count() before the launch and after
  int killed_rank = -1;                   // mpirun's "process rank R ... exited on signal S"
  int killed_signal = 0;
  int exit_rank = -1;  // mpirun's "Process name: [[J,1],R]" ... "Exit code: C"
  int exit_code = 0;
  int status = 0;  // mpirun's exit status (128 + signal when it was killed)
};

struct OomKill {
  int rank = -1;       // -1: no rank named (mpirun itself, or a process it started)
  uint64_t kills = 0;  // how much the count went up
  bool cgroup = true;
};

// At the end of a failed launch: mpirun's reports (from `out`), its exit `status`, and
// the count now (read_oom_count()) into `e`.
void finish_evidence(OomEvidence& e, const MpirunOutput& out, int status);

// An OOM kill per the file comment, or nullopt.
std::optional<OomKill> oom_kill_in(const OomEvidence& e);
// A note for etr-run to print when the count went up during the launch but no process of
// the job was killed by SIGKILL (another process of the cgroup was); "" otherwise.
std::string unexplained_oom_note(const OomEvidence& e);

// "rank 1 was killed by the kernel's out-of-memory killer (the memory cgroup counted 1
// oom_kill)".
std::string describe(const OomKill& k);

// What etr-run does after an OOM kill of a launch that ran with `halvings` halvings of the
// micro-batch and reported `micro_batch` (0: not reported).
struct OomDecision {
  bool relaunch = false;
  int halvings = 0;     // ETR_RUN_MEMORY_HALVINGS of the relaunch
  std::string message;  // one line for etr-run to print (without "etr-run: ")
};
OomDecision decide_after_oom(const OomKill& k, int halvings, int micro_batch);

}  // namespace etr::launcher
