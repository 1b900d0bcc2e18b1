#include "launcher/oom_watch.h"

#include <fstream>

#include "runtime/memory_budget.h"

namespace etr::launcher {
namespace {

// The "oom_kill N" line of /proc/vmstat (kernels since 4.13).
std::optional<uint64_t> machine_oom_kills() {
  std::ifstream in("/proc/vmstat");
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return std::nullopt;
}

}  // namespace

std::optional<OomCount> read_oom_count() {
  if (const auto cgroup = read_cgroup_memory()) return OomCount{cgroup->oom_kills, true};
  if (const auto kills = machine_oom_kills()) return OomCount{*kills, false};
  return std::nullopt;
}

namespace {

// How much the count went up (0 when it did not, or cannot be compared).
uint64_t increase(const OomEvidence& e) {
  if (!e.before || !e.after || e.before->cgroup != e.after->cgroup) return 0;
  return e.after->kills > e.before->kills ? e.after->kills - e.before->kills : 0;
}

bool sigkilled(const OomEvidence& e) {
  return (e.killed_rank >= 0 && e.killed_signal == 9) || (e.exit_rank >= 0 && e.exit_code == 137) ||
         e.status == 137;
}

}  // namespace

std::optional<OomKill> oom_kill_in(const OomEvidence& e) {
  const uint64_t kills = increase(e);
  if (kills == 0 || !sigkilled(e)) return std::nullopt;
  OomKill k;
  k.kills = kills;
  k.cgroup = e.after->cgroup;
  if (e.killed_rank >= 0 && e.killed_signal == 9) {
    k.rank = e.killed_rank;
  } else if (e.exit_rank >= 0 && e.exit_code == 137) {
    k.rank = e.exit_rank;
  }
  return k;
}

void finish_evidence(OomEvidence& e, const MpirunOutput& out, int status) {
  e.killed_rank = out.killed_rank();
  e.killed_signal = out.killed_signal();
  e.exit_rank = out.nonzero_exit().rank;
  e.exit_code = out.nonzero_exit().code;
  e.status = status;
  if (status != 0) e.after = read_oom_count();
}

std::string unexplained_oom_note(const OomEvidence& e) {
  const uint64_t kills = sigkilled(e) ? 0 : increase(e);
  if (kills == 0) return "";
  return std::string("note: ") + (e.after->cgroup ? "the memory cgroup" : "the kernel") +
         " counted " + std::to_string(kills) + (kills == 1 ? " oom_kill" : " oom_kills") +
         " during the launch, but no process of the job was killed by SIGKILL: not taken for the "
         "job's";
}

std::string describe(const OomKill& k) {
  const std::string who = k.rank >= 0 ? "rank " + std::to_string(k.rank)
                                      : "a process of the job (mpirun or one it started)";
  return who + " was killed by the kernel's out-of-memory killer (" +
         (k.cgroup ? "the memory cgroup" : "the kernel") + " counted " + std::to_string(k.kills) +
         (k.kills == 1 ? " oom_kill)" : " oom_kills)");
}

OomDecision decide_after_oom(const OomKill& k, int halvings, int micro_batch) {
  OomDecision d;
  d.halvings = halvings;
  const std::string what = describe(k);
  const std::string advice = "give the job more memory, or run fewer ranks per host";
  if (micro_batch == 1) {
    d.message = "error: " + what +
                " while it ran at micro-batch 1, its smallest; not relaunching: " + advice;
    return d;
  }
  if (halvings >= kMaxMemoryHalvings) {
    d.message = "error: " + what + " after its micro-batch was halved " + std::to_string(halvings) +
                " times; not relaunching: " + advice;
    return d;
  }
  d.relaunch = true;
  d.halvings = halvings + 1;
  d.message = what + "; relaunching with the micro-batch halved" + (halvings > 0 ? " again" : "") +
              " (ETR_RUN_MEMORY_HALVINGS=" + std::to_string(d.halvings) + ")";
  return d;
}

}  // namespace etr::launcher
