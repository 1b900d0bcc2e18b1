// bench/premise.h: the verdicts on injected measurements (what etr-bench refuses and
// why), and the meter and the pinning against references the kernel keeps: each thread's
// own CPU clock, each thread's own affinity.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <thread>
#include <vector>

#include "bench/premise.h"
#include "runtime/error.h"

namespace etr::bench {
namespace {

CpuUse use(double cores_busy, CpuList cpus) {
  return CpuUse{.wall_seconds = 2.0, .cpu_seconds = 2.0 * cores_busy, .cpus = std::move(cpus)};
}

TEST(PremiseFailure, OneThreadPinnedToOneCpuHolds) {
  EXPECT_EQ(premise_failure({.threads = 1, .pinned = true}, use(0.98, {0})), "");
  EXPECT_EQ(premise_failure({.threads = 1, .pinned = true}, use(1.0, {3})), "");
}

TEST(PremiseFailure, OneThreadUsingMoreThanOneCoreIsRefused) {
  // The reproducer: "1 thread" that kept 1.55 cores busy.
  EXPECT_EQ(premise_failure({.threads = 1}, use(1.55, {0, 1})), "1.55 cores busy for 1 thread");
  EXPECT_EQ(premise_failure({.threads = 1}, use(1.16, {0, 1})), "1.16 cores busy for 1 thread");
  // Within the tolerance for helper threads.
  EXPECT_EQ(premise_failure({.threads = 1}, use(1.14, {0, 1})), "");
  EXPECT_EQ(premise_failure({.threads = 1, .tolerance = 1.5}, use(1.4, {0, 1})), "");
}

TEST(PremiseFailure, PinnedClaimWithAWiderAffinityIsRefused) {
  EXPECT_EQ(premise_failure({.threads = 1, .pinned = true}, use(0.9, {0, 1})),
            "1 thread may run on 2 CPUs (0-1)");
  EXPECT_EQ(premise_failure({.threads = 2, .pinned = true}, use(1.9, {0, 1, 2, 5})),
            "2 threads may run on 4 CPUs (0-2,5)");
  // Not pinned: a wider affinity is accepted while CPU / wall stays within the claim.
  EXPECT_EQ(premise_failure({.threads = 1}, use(0.9, {0, 1})), "");
}

TEST(PremiseFailure, MoreThreadsThanCpusIsRefused) {
  EXPECT_EQ(premise_failure({.threads = 2}, use(1.0, {0})), "2 threads on 1 CPU (0)");
  EXPECT_EQ(premise_failure({.threads = 2, .pinned = true}, use(1.9, {0, 1})), "");
  EXPECT_EQ(premise_failure({.threads = 2}, use(2.4, {0, 1, 2, 3})),
            "2.40 cores busy for 2 threads");
}

TEST(PremiseFailure, EmptyRegionHolds) {
  EXPECT_EQ((CpuUse{.wall_seconds = 0, .cpu_seconds = 0, .cpus = {0}}).cores_busy(), 0);
  EXPECT_EQ(premise_failure({.threads = 1, .pinned = true}, CpuUse{.cpus = {0}}), "");
}

TEST(PremiseFailure, ThreadsWaitingForACpuAreRefused) {
  CpuUse u = use(0.66, {0});
  u.wait_seconds = 0.68;  // of 2 s wall: 34 % of one thread's time
  EXPECT_EQ(premise_failure({.threads = 1, .pinned = true}, u),
            "1 thread waited for a CPU 34% of the time (cores shared with other work)");
  // Two threads: the same wait is 17 % of their time.
  EXPECT_EQ(premise_failure({.threads = 2}, CpuUse{2.0, 3.0, 0.68, -1, {0, 1}}),
            "2 threads waited for a CPU 17% of the time (cores shared with other work)");
  u.wait_seconds = 0.19;  // 9.5 %: within the default 10 %
  EXPECT_EQ(premise_failure({.threads = 1, .pinned = true}, u), "");
  u.wait_seconds = 1.5;  // not checked, or unknown
  EXPECT_EQ(premise_failure({.threads = 1, .max_waiting = -1}, u), "");
  u.wait_seconds = -1;
  EXPECT_EQ(u.waiting(1), -1);
  EXPECT_EQ(premise_failure({.threads = 1}, u), "");
}

TEST(PremiseFailure, OtherWorkOnTheRowsCpusIsRefusedWhenChecked) {
  CpuUse u = use(0.95, {0});
  u.others_seconds = 0.9;  // of 2 s wall: 0.45 cores
  EXPECT_EQ(premise_failure({.threads = 1, .pinned = true, .max_others = 0.10}, u),
            "other work kept 0.45 cores busy on its CPU (0)");
  EXPECT_EQ(premise_failure({.threads = 1, .pinned = true}, u), "");  // not checked
  u.others_seconds = 0.18;                                            // 0.09 cores
  EXPECT_EQ(premise_failure({.threads = 1, .pinned = true, .max_others = 0.10}, u), "");
  // Two threads: 0.2 cores of other work is within 0.1 per thread.
  EXPECT_EQ(premise_failure({.threads = 2, .max_others = 0.10}, CpuUse{2.0, 3.8, 0, 0.4, {0, 1}}),
            "");
  // Too short a region for 10 ms ticks, or unknown: not judged.
  EXPECT_EQ(premise_failure({.threads = 1, .max_others = 0.10}, CpuUse{0.5, 0.5, 0, 0.4, {0}}), "");
  EXPECT_EQ(premise_failure({.threads = 1, .max_others = 0.10}, CpuUse{2.0, 2.0, 0, -1, {0}}), "");
}

TEST(Accumulate, SumsPiecesAndKeepsUnknownsUnknown) {
  CpuUse total{.others_seconds = 0, .cpus = {}};
  accumulate(total, CpuUse{1.0, 0.9, 0.1, 0.2, {0}});
  accumulate(total, CpuUse{2.0, 1.8, 0.2, 0.3, {0}});
  EXPECT_DOUBLE_EQ(total.wall_seconds, 3.0);
  EXPECT_DOUBLE_EQ(total.cpu_seconds, 2.7);
  EXPECT_NEAR(total.wait_seconds, 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(total.others_seconds, 0.5);
  EXPECT_EQ(total.cpus, CpuList{0});
  accumulate(total, CpuUse{1.0, 1.0, -1, -1, {0}});
  EXPECT_EQ(total.wait_seconds, -1);
  EXPECT_EQ(total.others_seconds, -1);
}

TEST(SharedCores, RanksNeedACpuEachBetweenThem) {
  EXPECT_EQ(shared_cores_failure({{0}, {1}}, 1), "");
  EXPECT_EQ(shared_cores_failure({{0, 1}, {0, 1}}, 1), "");  // unbound, enough CPUs
  EXPECT_EQ(shared_cores_failure({{0}, {0}}, 1), "2 ranks x 1 thread share 1 CPU (0)");
  EXPECT_EQ(shared_cores_failure({{0, 1}, {0, 1}, {0, 1}}, 1),
            "3 ranks x 1 thread share 2 CPUs (0-1)");
  EXPECT_EQ(shared_cores_failure({{0, 1}, {2, 3}}, 2), "");
  EXPECT_EQ(shared_cores_failure({{0, 1}, {1, 2}}, 2), "2 ranks x 2 threads share 3 CPUs (0-2)");
}

TEST(RanksPremiseFailure, NamesTheFirstRankOrHostThatFails) {
  const Premise one{.threads = 1};
  EXPECT_EQ(ranks_premise_failure(one, {use(1.0, {0}), use(1.0, {1})}, {"h", "h"}), "");
  EXPECT_EQ(ranks_premise_failure(one, {use(1.0, {0}), use(1.6, {0, 1})}, {"h", "h"}),
            "rank 1: 1.60 cores busy for 1 thread");
  EXPECT_EQ(ranks_premise_failure(one, {use(0.5, {0}), use(0.5, {0})}, {"h", "h"}),
            "on host h: 2 ranks x 1 thread share 1 CPU (0)");
  // CPU 0 of two hosts is two cores.
  EXPECT_EQ(ranks_premise_failure(one, {use(1.0, {0}), use(1.0, {0})}, {"a", "b"}), "");
  // A single rank's verdict carries no rank.
  EXPECT_EQ(ranks_premise_failure(one, {use(1.3, {0, 1})}, {"h"}), "1.30 cores busy for 1 thread");
}

TEST(RefusedCell, SaysPremiseFailed) {
  EXPECT_EQ(refused_cell("1.55 cores busy for 1 thread"),
            "premise failed: 1.55 cores busy for 1 thread");
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Spins until this thread has used `seconds` of CPU by its own clock; returns that time.
double spin_for_cpu(double seconds) {
  const double t0 = thread_cpu_seconds();
  volatile double sink = 0;
  while (thread_cpu_seconds() - t0 < seconds) {
    for (int i = 0; i < 1000; ++i) sink = sink + 1.0;
  }
  return thread_cpu_seconds() - t0;
}

// `n` threads, each spinning for `seconds` of its own CPU time; their sum.
double spin_threads(int n, double seconds) {
  std::vector<double> used(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back([&, i] { used[i] = spin_for_cpu(seconds); });
  for (auto& t : threads) t.join();
  double sum = 0;
  for (double u : used) sum += u;
  return sum;
}

TEST(CpuMeter, CountsTheCpuTimeOfEveryThread) {
  // Whatever else the machine runs: the process used at least what its threads used by
  // their own clocks, and no more than its CPUs could give it over the wall time.
  const CpuList allowed = process_cpus();
  CpuMeter meter;
  const double threads_cpu = spin_threads(2, 0.05);
  const CpuUse u = meter.stop();
  EXPECT_GE(u.cpu_seconds, threads_cpu - 1e-3);
  EXPECT_LE(u.cpu_seconds, u.wall_seconds * static_cast<double>(allowed.size()) + 0.01);
  EXPECT_EQ(u.cpus, allowed);
}

TEST(ScopedProcessAffinity, PinsThreadsThatAlreadyExistAndRestoresThem) {
  const CpuList before = process_cpus();
  const CpuList one = {before.front()};
  // A thread started before the pin, asked for its own affinity while pinned.
  std::mutex m;
  std::condition_variable cv;
  int stage = 0;
  CpuList seen_pinned, seen_after;
  std::thread other([&] {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return stage == 1; });
    seen_pinned = this_thread_cpus();
    stage = 2;
    cv.notify_all();
    cv.wait(lock, [&] { return stage == 3; });
    seen_after = this_thread_cpus();
  });
  {
    ScopedProcessAffinity pin(one);
    EXPECT_EQ(process_cpus(), one);
    std::unique_lock lock(m);
    stage = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return stage == 2; });
  }
  {
    std::lock_guard lock(m);
    stage = 3;
  }
  cv.notify_all();
  other.join();
  EXPECT_EQ(seen_pinned, one);
  EXPECT_EQ(seen_after, before);
  EXPECT_EQ(process_cpus(), before);
}

TEST(ScopedProcessAffinity, PinnedProcessKeepsAtMostItsCpusBusy) {
  // Two busy threads pinned to one CPU: the meter must not see two cores (CPU time
  // cannot outgrow wall time on one CPU), which is what makes a pinned 1-thread row true.
  const CpuList one = {process_cpus().front()};
  ScopedProcessAffinity pin(one);
  CpuMeter meter;
  spin_threads(2, 0.03);
  const CpuUse u = meter.stop();
  EXPECT_EQ(u.cpus, one);
  EXPECT_LT(u.cores_busy(), 1.05);
  EXPECT_EQ(premise_failure({.threads = 1, .pinned = true, .max_waiting = -1}, u), "");
}

TEST(CpuMeter, SeesThreadsWaitingForASharedCpu) {
  // Two busy threads on one CPU: whenever one runs the other waits, so their waiting
  // adds up to about the wall time (more if anything else runs there too); the verdict
  // on "1 thread" run this way is "cores shared".
  if (threads_wait_seconds() < 0) GTEST_SKIP() << "this kernel keeps no schedstat";
  const CpuList one = {process_cpus().front()};
  ScopedProcessAffinity pin(one);
  // The threads stay alive (asleep) until the meter has read them: a thread that ends
  // takes its schedstat with it.
  std::mutex m;
  std::condition_variable cv;
  int spun = 0;
  bool release = false;
  CpuMeter meter;
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&] {
      spin_for_cpu(0.03);
      std::unique_lock lock(m);
      ++spun;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    });
  }
  {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return spun == 2; });
  }
  const CpuUse u = meter.stop();
  {
    std::lock_guard lock(m);
    release = true;
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  EXPECT_GT(u.wait_seconds, 0.3 * u.wall_seconds);
  EXPECT_NE(premise_failure({.threads = 1, .pinned = true}, u).find("waited for a CPU"),
            std::string::npos);
}

TEST(CpuMeter, SeesOtherProcessesOnItsCpus) {
  // A child process spinning on this process's one CPU while it sleeps: the meter must
  // count at least the child's CPU time (its rusage) as other work there, less the
  // error of 10 ms ticks; more if anything else ran there too.
  if (cpu_busy_seconds().empty()) GTEST_SKIP() << "no /proc/stat";
  const CpuList one = {process_cpus().front()};
  ScopedProcessAffinity pin(one);  // the child inherits it
  CpuMeter meter;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    spin_for_cpu(1.1);  // a region of a second or more is judged
    _exit(0);
  }
  int status = 0;
  rusage ru{};
  ASSERT_EQ(wait4(child, &status, 0, &ru), child);
  const CpuUse u = meter.stop();
  const double child_cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  EXPECT_GE(child_cpu, 1.1);
  EXPECT_GE(u.others_seconds, child_cpu - 0.1);
  EXPECT_LT(u.cpu_seconds, 0.1);  // this process slept
  EXPECT_NE(premise_failure({.threads = 1, .pinned = true, .max_waiting = -1, .max_others = 0.1}, u)
                .find("other work kept"),
            std::string::npos);
}

TEST(ScopedProcessAffinity, RefusesCpusThisProcessMayNotUse) {
  const CpuList before = process_cpus();
  EXPECT_THROW(ScopedProcessAffinity({CPU_SETSIZE - 1}), ConfigError);
  EXPECT_THROW(ScopedProcessAffinity({}), ConfigError);
  EXPECT_EQ(process_cpus(), before);
}

}  // namespace
}  // namespace etr::bench
