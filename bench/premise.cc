#include "bench/premise.h"

#include <dirent.h>
#include <sched.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <string>

#include "bench/table.h"
#include "runtime/error.h"

namespace etr::bench {
namespace {

double clock_seconds(clockid_t clock) {
  timespec t{};
  ::clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// The thread ids of this process (/proc/self/task); empty when /proc is not there.
std::vector<pid_t> thread_ids() {
  std::vector<pid_t> out;
  DIR* dir = ::opendir("/proc/self/task");
  if (!dir) return out;
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long tid = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0' && tid > 0) out.push_back(static_cast<pid_t>(tid));
  }
  ::closedir(dir);
  return out;
}

cpu_set_t to_set(const CpuList& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  return set;
}

std::string plural(long n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

std::string cpus_text(const CpuList& cpus) {
  return plural(static_cast<long>(cpus.size()), "CPU") + " (" + format_cpus(cpus) + ")";
}

}  // namespace

void CpuMeter::restart() {
  busy0_ = cpu_busy_seconds();
  wait0_ = threads_wait_seconds();
  wall0_ = clock_seconds(CLOCK_MONOTONIC);
  cpu0_ = clock_seconds(CLOCK_PROCESS_CPUTIME_ID);
}

CpuUse CpuMeter::stop() const {
  CpuUse u;
  u.cpu_seconds = clock_seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu0_;
  u.wall_seconds = clock_seconds(CLOCK_MONOTONIC) - wall0_;
  const double wait = threads_wait_seconds();
  u.wait_seconds = wait < 0 || wait0_ < 0 ? -1 : std::max(0.0, wait - wait0_);
  u.cpus = process_cpus();
  const std::vector<double> busy = cpu_busy_seconds();
  if (!busy.empty() && busy.size() == busy0_.size()) {
    double on_cpus = 0;
    for (int c : u.cpus) {
      if (c < static_cast<int>(busy.size())) on_cpus += busy[c] - busy0_[c];
    }
    u.others_seconds = std::max(0.0, on_cpus - u.cpu_seconds);
  }
  return u;
}

void accumulate(CpuUse& into, const CpuUse& u) {
  const auto sum = [](double a, double b) { return a < 0 || b < 0 ? -1 : a + b; };
  into.wall_seconds += u.wall_seconds;
  into.cpu_seconds += u.cpu_seconds;
  into.wait_seconds = sum(into.wait_seconds, u.wait_seconds);
  into.others_seconds = sum(into.others_seconds, u.others_seconds);
  into.cpus = u.cpus;
}

std::string premise_failure(const Premise& p, const CpuUse& use) {
  const std::string claim = plural(p.threads, "thread");
  const long n = static_cast<long>(use.cpus.size());
  if (n < p.threads) return claim + " on " + cpus_text(use.cpus);
  if (p.pinned && n > p.threads) return claim + " may run on " + cpus_text(use.cpus);
  if (use.cores_busy() > p.threads * p.tolerance) {
    return cell("%.2f cores busy for ", use.cores_busy()) + claim;
  }
  const double others = use.others_busy();
  if (p.max_others >= 0 && use.wall_seconds >= 1.0 && others > p.max_others * p.threads) {
    return cell("other work kept %.2f cores busy on its CPU%s (", others,
                use.cpus.size() == 1 ? "" : "s") +
           format_cpus(use.cpus) + ")";
  }
  const double waiting = use.waiting(p.threads);
  if (p.max_waiting >= 0 && waiting > p.max_waiting) {
    return claim + cell(" waited for a CPU %.0f%% of the time (cores shared with other work)",
                        waiting * 100);
  }
  return "";
}

std::string shared_cores_failure(const std::vector<CpuList>& cpus_of_rank, int threads) {
  CpuList all;
  for (const CpuList& c : cpus_of_rank) all.insert(all.end(), c.begin(), c.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  const long ranks = static_cast<long>(cpus_of_rank.size());
  if (static_cast<long>(all.size()) >= ranks * threads) return "";
  return plural(ranks, "rank") + " x " + plural(threads, "thread") + " share " + cpus_text(all);
}

std::string ranks_premise_failure(const Premise& p, const std::vector<CpuUse>& uses,
                                  const std::vector<std::string>& hosts) {
  for (size_t r = 0; r < uses.size(); ++r) {
    std::string why = premise_failure(p, uses[r]);
    if (!why.empty()) return uses.size() == 1 ? why : "rank " + std::to_string(r) + ": " + why;
  }
  std::map<std::string, std::vector<CpuList>> by_host;
  for (size_t r = 0; r < uses.size() && r < hosts.size(); ++r) {
    by_host[hosts[r]].push_back(uses[r].cpus);
  }
  for (const auto& [host, cpus] : by_host) {
    std::string why = shared_cores_failure(cpus, p.threads);
    if (!why.empty()) return "on host " + host + ": " + why;
  }
  return "";
}

std::string refused_cell(const std::string& why) {
  return "premise failed: " + why;
}

CpuList process_cpus() {
  cpu_set_t all;
  CPU_ZERO(&all);
  for (pid_t tid : thread_ids()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    // A thread that ended since the listing has no affinity to add.
    if (::sched_getaffinity(tid, sizeof set, &set) == 0) CPU_OR(&all, &all, &set);
  }
  if (CPU_COUNT(&all) == 0) return this_thread_cpus();
  CpuList out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &all)) out.push_back(c);
  }
  return out;
}

std::vector<double> cpu_busy_seconds() {
  std::vector<double> out;
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return out;
  const double tick = 1.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    int cpu = -1;
    unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                       steal = 0;
    if (std::sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &user, &nice,
                    &system, &idle, &iowait, &irq, &softirq, &steal) != 9 ||
        cpu < 0 || cpu >= CPU_SETSIZE) {
      continue;  // the "cpu " total line, or the lines after the CPUs
    }
    if (static_cast<size_t>(cpu) >= out.size()) out.resize(static_cast<size_t>(cpu) + 1, 0);
    out[static_cast<size_t>(cpu)] =
        static_cast<double>(user + nice + system + irq + softirq + steal) * tick;
  }
  std::fclose(f);
  return out;
}

double threads_wait_seconds() {
  double sum = 0;
  bool any = false;
  for (pid_t tid : thread_ids()) {
    const std::string path = "/proc/self/task/" + std::to_string(tid) + "/schedstat";
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (!f) continue;  // the thread ended, or no schedstat in this kernel
    unsigned long long run_ns = 0, wait_ns = 0;
    if (std::fscanf(f, "%llu %llu", &run_ns, &wait_ns) == 2) {
      sum += static_cast<double>(wait_ns) * 1e-9;
      any = true;
    }
    std::fclose(f);
  }
  return any ? sum : -1;
}

bool set_process_cpus(const CpuList& cpus) {
  const cpu_set_t set = to_set(cpus);
  if (CPU_COUNT(&set) == 0) return false;
  // Twice: a thread created during the first pass by a thread not yet moved inherited the
  // old affinity; the second pass finds it.
  for (int pass = 0; pass < 2; ++pass) {
    for (pid_t tid : thread_ids()) {
      if (::sched_setaffinity(tid, sizeof set, &set) != 0 && errno != ESRCH) return false;
    }
  }
  return true;
}

ScopedProcessAffinity::ScopedProcessAffinity(const CpuList& cpus) : saved_(this_thread_cpus()) {
  if (!set_process_cpus(cpus)) {
    set_process_cpus(saved_);
    throw ConfigError("cannot pin the benchmark to CPUs " + format_cpus(cpus) +
                      ": this process may only run on " + format_cpus(saved_));
  }
}

ScopedProcessAffinity::~ScopedProcessAffinity() {
  set_process_cpus(saved_);
}

}  // namespace etr::bench
