// HostCommunicator's hierarchical allreduce (collectives/hierarchical.h) and the host
// topology it runs on. ctest runs this binary on one machine with the test hook
// ETR_TEST_RANKS_PER_NODE=K, which makes consecutive blocks of K ranks count as hosts:
//   np 4, K 2 and np 6, K 3: 2 hosts x 2 and x 3 ranks (hier runs as the alternating
//     ring, two_host_allreduce; auto picks it above the ring threshold)
//   np 6, K 2: 3 hosts x 2 ranks (hier runs with a host ring per local index)
//   np 2, K 1 and np 3, K 1: 2 and 3 hosts x 1 rank (hier runs, as the host ring alone;
//     auto keeps the ring)
//   np 4, K 3: hosts of 3 + 1 ranks (uneven: hier falls back to the ring)
//   np 1 without K: one host.
// The expected topology is derived here from K (or, without K, from the hostnames every
// rank reports), not from the communicator.
//
// Every case is checked against a double-precision reference of all ranks' inputs
// (collectives_test_util.h), and every rank's output is gathered on rank 0 and compared
// with rank 0's byte for byte. Tolerance: each element of a sum is n terms added in
// n - 1 rounded steps (L - 1 within its host, then H - 1 across hosts), the same count
// as the flat ring's, and an average divides once; so the ring's tolerances
// (tolerance(): per dtype, proportional to np, relative to the sum of magnitudes) hold.
// Exact inputs (sums representable in every dtype) must come out exact.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "collectives/host_communicator.h"
#include "mpi/collectives_test_util.h"
#include "mpi/mpi_test_main.h"

namespace etr::testing {
namespace {

struct ExpectedTopology {
  int nodes = 1;
  int per_node = 0;  // 0: hosts of different sizes
  int node = 0, local_rank = 0;
  bool hier_runs() const { return nodes > 1 && per_node > 0; }
  bool auto_picks_hier() const { return hier_runs() && per_node >= 2; }
};

// From ETR_TEST_RANKS_PER_NODE, else from every rank's hostname (hosts in order of
// their lowest rank).
ExpectedTopology expected_topology() {
  const int np = world().size(), r = world().rank();
  std::vector<int> host_of(static_cast<size_t>(np));
  if (const char* k_text = std::getenv("ETR_TEST_RANKS_PER_NODE")) {
    const int k = std::atoi(k_text);
    for (int q = 0; q < np; ++q) host_of[q] = q / k;
  } else {
    char mine[256] = {0};
    std::strncpy(mine, world().hostname().c_str(), sizeof mine - 1);
    std::vector<char> all(static_cast<size_t>(np) * sizeof mine);
    MPI_Allgather(mine, sizeof mine, MPI_CHAR, all.data(), sizeof mine, MPI_CHAR,
                  world().group().comm());
    std::map<std::string, int> index;
    for (int q = 0; q < np; ++q) {
      const std::string name(&all[q * sizeof mine]);
      host_of[q] = index.emplace(name, static_cast<int>(index.size())).first->second;
    }
  }
  ExpectedTopology e;
  e.nodes = *std::max_element(host_of.begin(), host_of.end()) + 1;
  std::vector<int> sizes(static_cast<size_t>(e.nodes), 0);
  for (int q = 0; q < np; ++q) {
    if (q == r) e.local_rank = sizes[host_of[q]];
    ++sizes[host_of[q]];
  }
  e.node = host_of[r];
  const bool even = std::set<int>(sizes.begin(), sizes.end()).size() == 1;
  e.per_node = even ? sizes[0] : 0;
  return e;
}

std::string topology_text(const ExpectedTopology& e) {
  return std::to_string(e.nodes) + " hosts, " + std::to_string(e.per_node) + " ranks per host";
}

// "" when every rank's `n` bytes at `data` equal rank 0's; else which ranks differ.
// Collective; the verdict is rank 0's (the others return "").
std::string differs_from_rank0(const void* data, size_t n) {
  const int np = world().size(), r = world().rank();
  std::vector<unsigned char> all(r == 0 ? n * static_cast<size_t>(np) : 0);
  MPI_Gather(data, static_cast<int>(n), MPI_BYTE, all.data(), static_cast<int>(n), MPI_BYTE, 0,
             world().group().comm());
  std::string out;
  for (int q = 1; q < np && r == 0; ++q) {
    if (n > 0 && std::memcmp(all.data(), all.data() + q * n, n) != 0)
      out += " rank " + std::to_string(q);
  }
  return out.empty() ? "" : "not bitwise equal to rank 0's output on" + out;
}

uint64_t salt_for(DType t, Fill fill, int64_t count) {
  return static_cast<uint64_t>(count) * 977 + static_cast<uint64_t>(t) * 13 +
         (fill == Fill::kRandom ? 5 : 0);
}

// One allreduce checked against the reference, for overruns, for an untouched input (out
// of place) and against rank 0's output.
void run_case(HostCommunicator& comm, const std::string& extra, DType t, Fill fill, ReduceOp op,
              bool in_place, int64_t count, const std::vector<double>& inputs) {
  const int r = comm.rank(), np = comm.size();
  const std::string name = label("allreduce", op, t, count, in_place, extra, np);
  Buffer in(t, count), out(t, in_place ? 0 : count);
  in.fill_from(inputs, r * count);
  out.fill_sentinel();
  const std::vector<unsigned char> in_before(
      static_cast<const unsigned char*>(in.data()),
      static_cast<const unsigned char*>(in.data()) + in.nbytes());
  const std::exception_ptr error = run_op([&] {
    return in_place ? comm.allreduce(in.view(), op) : comm.allreduce(in.view(), out.view(), op);
  });
  Buffer& result = in_place ? in : out;
  if (t == DType::kI32 && op == ReduceOp::kAvg) {
    EXPECT_TRUE(error) << name << ": avg on i32 must be rejected";
    return;
  }
  EXPECT_FALSE(error) << name << " threw: " << what(error);
  const Reference ref = reduce_reference(inputs, np, count, 0, count, op);
  EXPECT_EQ(compare(t, result.data(), ref, tolerance(t, fill, op, np)), "")
      << name << " on rank " << r;
  EXPECT_TRUE(result.guard_intact()) << name << ": wrote past the end of the output";
  if (!in_place) {
    EXPECT_TRUE(std::equal(in_before.begin(), in_before.end(),
                           static_cast<const unsigned char*>(in.data())))
        << name << ": an out-of-place allreduce modified its input";
  }
  EXPECT_EQ(differs_from_rank0(result.data(), result.nbytes()), "") << name;
}

void run_matrix(HostCommunicator& comm, const std::string& extra, Fill fill,
                const std::vector<DType>& dtypes, const std::vector<int64_t>& counts,
                const std::vector<ReduceOp>& ops) {
  for (DType t : dtypes) {
    for (int64_t count : counts) {
      const std::vector<double> inputs =
          all_inputs(t, fill, salt_for(t, fill, count), comm.size(), count);
      for (ReduceOp op : ops)
        for (bool in_place : {true, false})
          run_case(comm, extra, t, fill, op, in_place, count, inputs);
    }
  }
}

// 0, 1, 3, n-1, n, n+1 (fewer elements than ranks: empty segments within a host and
// across hosts), primes, and odd counts large enough for many pipelined chunks.
std::vector<int64_t> counts_to_test() {
  const int64_t n = world().size();
  std::vector<int64_t> c = {0, 1, 3, n - 1, n, n + 1, 13, 97, 1000, 10007, 65537, 300001};
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

std::string hier_extra(const HostCommunicator& comm) {
  return std::string("algo=hier (runs ") + allreduce_algo_name(comm.choose_allreduce(1 << 20)) +
         ", " + comm.topology().str() + ")";
}

TEST(HierTopology, MatchesTheHostsOrTheTestHook) {
  const ExpectedTopology e = expected_topology();
  HostCommunicator comm(world().group(), test_options(AllreduceAlgo::kHierarchical));
  EXPECT_EQ(comm.nodes(), e.nodes) << "expected " << topology_text(e);
  EXPECT_EQ(comm.ranks_per_node(), e.per_node) << "expected " << topology_text(e);
  EXPECT_EQ(comm.topology().node, e.node);
  EXPECT_EQ(comm.topology().local_rank, e.local_rank);
  EXPECT_EQ(comm.topology().hierarchical_possible(), e.hier_runs());
}

TEST(HierChoice, HierWhereItCanRunTheRingOtherwise) {
  const ExpectedTopology e = expected_topology();
  HostCommunicator forced(world().group(), test_options(AllreduceAlgo::kHierarchical));
  const AllreduceAlgo hier_or_ring =
      e.hier_runs() ? AllreduceAlgo::kHierarchical : AllreduceAlgo::kRing;
  EXPECT_EQ(forced.choose_allreduce(4), hier_or_ring) << topology_text(e);
  EXPECT_EQ(forced.choose_allreduce(size_t{1} << 30), hier_or_ring) << topology_text(e);

  HostCommunicator automatic(world().group(), test_options(AllreduceAlgo::kAuto));
  const size_t limit =
      automatic.options().small_bytes * static_cast<size_t>(std::max(1, world().size() - 1));
  const AllreduceAlgo large =
      e.auto_picks_hier() ? AllreduceAlgo::kHierarchical : AllreduceAlgo::kRing;
  EXPECT_EQ(automatic.choose_allreduce(limit), large) << topology_text(e);
  EXPECT_EQ(automatic.choose_allreduce(size_t{1} << 30), large) << topology_text(e);
  if (world().size() > 1) {
    EXPECT_EQ(automatic.choose_allreduce(limit - 1), AllreduceAlgo::kRecursiveDoubling);
  }
}

TEST(HierChoice, NameParsesBothWays) {
  EXPECT_EQ(parse_allreduce_algo("hier"), AllreduceAlgo::kHierarchical);
  EXPECT_STREQ(allreduce_algo_name(AllreduceAlgo::kHierarchical), "hier");
}

// Exact inputs: sum, max and min exact in every dtype, avg within 4 roundoffs.
TEST(HierAllreduce, ExactForEveryOpDtypeAndCount) {
  HostCommunicator comm(world().group(), test_options(AllreduceAlgo::kHierarchical));
  run_matrix(comm, hier_extra(comm), Fill::kExact,
             {std::begin(kAllDTypes), std::end(kAllDTypes)}, counts_to_test(),
             {std::begin(kAllOps), std::end(kAllOps)});
}

// Random inputs round: within the stated tolerance, and still bitwise equal on all ranks.
TEST(HierAllreduce, RandomWithinToleranceAndIdenticalOnEveryRank) {
  HostCommunicator comm(world().group(), test_options(AllreduceAlgo::kHierarchical));
  run_matrix(comm, "random, " + hier_extra(comm), Fill::kRandom,
             {DType::kF32, DType::kF64, DType::kBF16, DType::kF16},
             {1, 3, 1000, 10007, 65537, 300001},
             {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin});
}

// 4 KiB chunks at depth 1 and 2: every phase's pipeline wraps its window many times.
TEST(HierAllreduce, SmallChunksAndShallowDepth) {
  for (int depth : {1, 2}) {
    CommOptions o = test_options(AllreduceAlgo::kHierarchical);
    o.chunk_bytes = 4096;
    o.depth = depth;
    HostCommunicator comm(world().group(), o);
    const std::string extra = hier_extra(comm) + ", chunk=4096, depth=" + std::to_string(depth);
    run_matrix(comm, extra, Fill::kRandom, {DType::kF32, DType::kBF16, DType::kF64},
               {1000, 10007, 65537}, {ReduceOp::kSum, ReduceOp::kAvg});
  }
}

// auto: recursive doubling below its limit, hier (or the ring) above, on one
// communicator in turn, so the host rings' traffic and the group's never meet.
TEST(HierAllreduce, AutoAroundTheSwitchAndInterleaved) {
  HostCommunicator comm(world().group(), test_options(AllreduceAlgo::kAuto));
  const int64_t limit = static_cast<int64_t>(comm.options().small_bytes) *
                        std::max(1, world().size() - 1) / 4;  // f32 elements
  const std::string extra = std::string("algo=auto (large: ") +
                            allreduce_algo_name(comm.choose_allreduce(1 << 30)) + ")";
  run_matrix(comm, extra, Fill::kRandom, {DType::kF32},
             {limit - 1, limit, 1, limit + 1, 300001, 7}, {ReduceOp::kSum, ReduceOp::kAvg});
}

}  // namespace
}  // namespace etr::testing
