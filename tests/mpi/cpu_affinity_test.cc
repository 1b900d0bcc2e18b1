// runtime/cpu_affinity.h at np 1-2: the spare CPUs of a node are its CPUs minus the ones
// its ranks are bound to, for bindings this test sets itself (so the answer is known
// without asking the code under test), and a thread bound to them runs only there; the
// ranks on a node are those of one machine, also when MPI sees hosts of their own
// (tests/cluster runs this on simulated hosts with ETR_TEST_RANKS_ON_MACHINE).
#include <gtest/gtest.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <thread>

#include "mpi/mpi_test_main.h"
#include "runtime/cpu_affinity.h"

namespace etr::testing {
namespace {

// Binds the calling thread to `cpus` for the scope, and restores its affinity after.
class ScopedBinding {
 public:
  explicit ScopedBinding(const CpuList& cpus) : saved_(this_thread_cpus()) {
    EXPECT_TRUE(bind_this_thread(cpus)) << format_cpus(cpus);
  }
  ~ScopedBinding() { bind_this_thread(saved_); }

 private:
  CpuList saved_;
};

CpuList minus(const CpuList& all, const std::set<int>& taken) {
  CpuList out;
  for (int c : all) {
    if (!taken.contains(c)) out.push_back(c);
  }
  return out;
}

// ctest runs every rank on this machine; tests/cluster's simulated hosts give the count
// (ETR_TEST_RANKS_ON_MACHINE) and MPI's own node size (ETR_TEST_RANKS_ON_MPI_NODE),
// which differs there: each simulated host is a node to MPI but shares this machine's CPUs.
TEST(CpuAffinity, RanksOnANodeAreThoseOfTheMachine) {
  const char* machine = std::getenv("ETR_TEST_RANKS_ON_MACHINE");
  const int expected = machine ? std::atoi(machine) : world().size();
  EXPECT_EQ(ranks_on_this_node(world().group()), expected);
  if (const char* mpi_node = std::getenv("ETR_TEST_RANKS_ON_MPI_NODE")) {
    MPI_Comm shared;
    MPI_Comm_split_type(world().group().comm(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
    int size = 0;
    MPI_Comm_size(shared, &size);
    MPI_Comm_free(&shared);
    EXPECT_EQ(size, std::atoi(mpi_node)) << "the premise: MPI counts each simulated host";
  }
}

TEST(CpuAffinity, FormatsRanges) {
  EXPECT_EQ(format_cpus({}), "none");
  EXPECT_EQ(format_cpus({5}), "5");
  EXPECT_EQ(format_cpus({0, 1, 2, 3, 6}), "0-3,6");
  EXPECT_EQ(format_cpus({1, 3, 4, 9, 10, 11}), "1,3-4,9-11");
}

// The node's CPUs do not depend on the caller's binding, and hold it.
TEST(CpuAffinity, NodeCpusDoNotDependOnTheCallersBinding) {
  const CpuList all = node_cpus();
  ASSERT_FALSE(all.empty());
  EXPECT_LE(static_cast<unsigned>(all.size()), std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
  for (int c : this_thread_cpus()) EXPECT_TRUE(std::ranges::binary_search(all, c)) << c;
  const ScopedBinding bound({all.back()});
  EXPECT_EQ(this_thread_cpus(), CpuList{all.back()});
  EXPECT_EQ(node_cpus(), all);
}

// Every rank (all on this node) bound to CPU rank % n: the rest are spare.
TEST(CpuAffinity, SpareCpusAreThoseNoRankIsBoundTo) {
  const CpuList all = node_cpus();
  const int n = static_cast<int>(all.size());
  const ScopedBinding bound({all[static_cast<size_t>(world().rank() % n)]});
  std::set<int> taken;
  for (int r = 0; r < world().size(); ++r) taken.insert(all[static_cast<size_t>(r % n)]);
  EXPECT_EQ(spare_node_cpus(world().group()), minus(all, taken));
}

// Every rank bound to CPU 0: all the others are spare, whatever the world.
TEST(CpuAffinity, RanksSharingOneCpuLeaveTheRest) {
  const CpuList all = node_cpus();
  const ScopedBinding bound({all.front()});
  EXPECT_EQ(spare_node_cpus(world().group()), minus(all, {all.front()}));
}

// Unbound ranks may run anywhere: nothing is spare.
TEST(CpuAffinity, UnboundRanksLeaveNothingSpare) {
  const ScopedBinding unbound(node_cpus());
  EXPECT_TRUE(spare_node_cpus(world().group()).empty());
}

TEST(CpuAffinity, ABoundThreadRunsOnlyOnItsCpus) {
  const CpuList all = node_cpus();
  const CpuList want = {all.back()};
  CpuList seen;
  int cpu = -1;
  std::thread t([&] {
    if (!bind_this_thread(want)) return;
    seen = this_thread_cpus();
    cpu = sched_getcpu();
  });
  t.join();
  EXPECT_EQ(seen, want);
  EXPECT_EQ(cpu, want.front());
  EXPECT_FALSE(bind_this_thread({})) << "an empty list must leave the affinity unchanged";
}

}  // namespace
}  // namespace etr::testing
