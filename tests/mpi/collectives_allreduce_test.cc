// HostCommunicator::allreduce over the world group, at every world size ctest runs
// (CONTRIBUTING.md, style 9): every op x dtype x element count x in-place/out-of-place, with each
// algorithm forced in turn, and the ring's pipelining pushed to many small chunks.
//
// Every rank computes the reference from the input formula (collectives_test_util.h);
// every case also checks that nothing was written past the output, that an
// out-of-place input is left untouched, and (at the end of each test) that the output
// was bitwise identical on every rank: data-parallel replicas depend on that.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/host_communicator.h"
#include "mpi/collectives_test_util.h"
#include "mpi/mpi_test_main.h"
#include "runtime/error.h"

namespace etr::testing {
namespace {

// 0, tiny, primes and non-multiples of every world size; 65537 and 300001 are above
// the 64 KiB recursive-doubling limit for every dtype but bf16/f16 at 65537, so auto runs
// the ring there.
constexpr int64_t kSizes[] = {0, 1, 2, 3, 7, 13, 97, 1000, 10007, 65537, 300001};
constexpr int64_t kRandomSizes[] = {1, 13, 1000, 10007, 65537, 300001};

uint64_t salt_for(DType t, Fill fill, int64_t count) {
  return static_cast<uint64_t>(count) * 131 + static_cast<uint64_t>(t) * 7 +
         (fill == Fill::kRandom ? 3 : 0);
}

bool is_16bit(DType t) {
  return t == DType::kBF16 || t == DType::kF16;
}

// What the whole test saw, for the checks at its end.
struct Tally {
  ReplicaHashes hashes;
  int mpi_rejections = 0;
  std::string mpi_rejection_message;
};

// One allreduce: issue, wait, check the result against `ref` within `tol`, the guard
// elements, the untouched input (out-of-place), and record the output's hash.
void run_case(HostCommunicator& comm, const std::string& extra, DType t, Fill fill, ReduceOp op,
              bool in_place, int64_t count, const std::vector<double>& inputs, const Reference& ref,
              Tally& tally) {
  const int r = comm.rank(), np = comm.size();
  const std::string name = label("allreduce", op, t, count, in_place, extra, np);
  Buffer in(t, count), out(t, in_place ? 0 : count);
  in.fill_from(inputs, r * count);
  out.fill_sentinel();
  std::vector<unsigned char> in_before(static_cast<const unsigned char*>(in.data()),
                                       static_cast<const unsigned char*>(in.data()) + in.nbytes());
  std::exception_ptr error = run_op([&] {
    return in_place ? comm.allreduce(in.view(), op) : comm.allreduce(in.view(), out.view(), op);
  });
  Buffer& result = in_place ? in : out;

  if (t == DType::kI32 && op == ReduceOp::kAvg) {
    EXPECT_TRUE(holds<InvalidArgument>(error))
        << name << ": avg on i32 must be rejected with InvalidArgument; got: " << what(error);
    tally.hashes.add(name + " [rejected]", nullptr, 0);
    return;
  }
  if (error && is_16bit(t) && comm.options().allreduce_algo == AllreduceAlgo::kMpi &&
      holds<InvalidArgument>(error)) {
    // MPI has no bf16/f16 type: rejecting them with a sentence is allowed.
    EXPECT_GT(what(error).size(), 20u) << name << ": rejection without a sentence";
    ++tally.mpi_rejections;
    tally.mpi_rejection_message = what(error);
    tally.hashes.add(name + " [rejected]", nullptr, 0);
    return;
  }
  EXPECT_FALSE(error) << name << " threw: " << what(error);
  EXPECT_EQ(compare(t, result.data(), ref, tolerance(t, fill, op, np)), "")
      << name << " on rank " << r;
  EXPECT_TRUE(result.guard_intact()) << name << ": wrote past the end of the output";
  if (!in_place) {
    EXPECT_TRUE(in.guard_intact()) << name << ": wrote past the end of the input";
    // Not memcmp: at count 0 both pointers may be null, which memcmp may not take (UBSan).
    EXPECT_TRUE(std::equal(in_before.begin(), in_before.end(),
                           static_cast<const unsigned char*>(in.data())))
        << name << ": an out-of-place allreduce modified its input";
  }
  tally.hashes.add(name, result.data(), result.nbytes());
}

// Runs every (dtype, count, op, placement) given through one communicator.
void run_matrix(HostCommunicator& comm, const std::string& extra, Fill fill,
                const std::vector<DType>& dtypes, const std::vector<int64_t>& sizes,
                const std::vector<ReduceOp>& ops, Tally& tally) {
  const int np = comm.size();
  for (DType t : dtypes) {
    for (int64_t count : sizes) {
      const std::vector<double> inputs = all_inputs(t, fill, salt_for(t, fill, count), np, count);
      for (ReduceOp op : ops) {
        const Reference ref = reduce_reference(inputs, np, count, 0, count, op);
        for (bool in_place : {true, false})
          run_case(comm, extra, t, fill, op, in_place, count, inputs, ref, tally);
      }
    }
  }
}

void expect_identical_on_all_ranks(const Tally& tally) {
  for (const std::string& c : tally.hashes.differing(world().group().comm()))
    ADD_FAILURE() << c << ": the output is not bitwise identical on every rank";
}

void report_mpi_rejections(const Tally& tally) {
  if (tally.mpi_rejections > 0 && world().rank() == 0)
    std::printf("note: algo=mpi rejected %d bf16/f16 cases: %s\n", tally.mpi_rejections,
                tally.mpi_rejection_message.c_str());
}

class AllreduceAlgoTest : public ::testing::TestWithParam<AllreduceAlgo> {};

// Sums of kExact inputs are exact in every dtype, so every op but avg must match the
// double-precision reference exactly, whatever the algorithm.
TEST_P(AllreduceAlgoTest, EveryOpDtypeAndSizeIsExact) {
  HostCommunicator comm(world().group(), test_options(GetParam()));
  Tally tally;
  run_matrix(comm, std::string("algo=") + algo_name(GetParam()), Fill::kExact,
             {std::begin(kAllDTypes), std::end(kAllDTypes)}, {std::begin(kSizes), std::end(kSizes)},
             {std::begin(kAllOps), std::end(kAllOps)}, tally);
  expect_identical_on_all_ranks(tally);
  report_mpi_rejections(tally);
}

// Random inputs round; the result must stay within the stated tolerances and still be
// bitwise identical on every rank.
TEST_P(AllreduceAlgoTest, RandomValuesWithinToleranceAndIdenticalOnEveryRank) {
  HostCommunicator comm(world().group(), test_options(GetParam()));
  Tally tally;
  run_matrix(comm, std::string("random, algo=") + algo_name(GetParam()), Fill::kRandom,
             {DType::kF32, DType::kF64, DType::kBF16, DType::kF16},
             {std::begin(kRandomSizes), std::end(kRandomSizes)},
             {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}, tally);
  expect_identical_on_all_ranks(tally);
  report_mpi_rejections(tally);
}

INSTANTIATE_TEST_SUITE_P(Algos, AllreduceAlgoTest,
                         ::testing::Values(AllreduceAlgo::kRing, AllreduceAlgo::kRecursiveDoubling,
                                           AllreduceAlgo::kMpi, AllreduceAlgo::kAuto),
                         [](const ::testing::TestParamInfo<AllreduceAlgo>& info) {
                           return std::string(algo_name(info.param));
                         });

// chunk_bytes 4096 and depth 1 or 2: a 10007-element f32 ring moves ~40 KB in chunks of
// 4 KiB, so the pipeline wraps its in-flight window many times per block.
struct PipelineParam {
  AllreduceAlgo algo;
  int depth;
};

class AllreducePipelineTest : public ::testing::TestWithParam<PipelineParam> {};

TEST_P(AllreducePipelineTest, SmallChunksAndShallowDepth) {
  CommOptions o = test_options(GetParam().algo);
  o.chunk_bytes = 4096;
  o.depth = GetParam().depth;
  HostCommunicator comm(world().group(), o);
  Tally tally;
  const std::string extra = std::string("algo=") + algo_name(GetParam().algo) +
                            ", chunk=4096, depth=" + std::to_string(GetParam().depth);
  run_matrix(comm, extra, Fill::kRandom, {std::begin(kAllDTypes), std::end(kAllDTypes)},
             {1000, 10007, 65537}, {ReduceOp::kSum, ReduceOp::kAvg}, tally);
  run_matrix(comm, extra, Fill::kExact, {DType::kF32, DType::kBF16}, {3, 4099},
             {ReduceOp::kMin, ReduceOp::kMax}, tally);
  expect_identical_on_all_ranks(tally);
}

INSTANTIATE_TEST_SUITE_P(Chunks, AllreducePipelineTest,
                         ::testing::Values(PipelineParam{AllreduceAlgo::kRing, 1},
                                           PipelineParam{AllreduceAlgo::kRing, 2},
                                           PipelineParam{AllreduceAlgo::kAuto, 1}),
                         [](const ::testing::TestParamInfo<PipelineParam>& info) {
                           return std::string(algo_name(info.param.algo)) + "_depth" +
                                  std::to_string(info.param.depth);
                         });

// Chunks smaller than, or not a multiple of, the element size: 6-byte chunks hold one
// f32/f64 element or three bf16 ones; 1000-byte chunks split f64 at 125 elements.
TEST(AllreducePipeline, ChunksThatAreNotAMultipleOfTheElementSize) {
  Tally tally;
  for (size_t chunk_bytes : {size_t{6}, size_t{1000}}) {
    CommOptions o = test_options(AllreduceAlgo::kRing);
    o.chunk_bytes = chunk_bytes;
    o.depth = 3;
    HostCommunicator comm(world().group(), o);
    const std::vector<int64_t> sizes =
        chunk_bytes < 8 ? std::vector<int64_t>{1, 7, 97, 1000} : std::vector<int64_t>{1000, 10007};
    run_matrix(comm, "algo=ring, chunk=" + std::to_string(chunk_bytes) + ", depth=3", Fill::kRandom,
               {DType::kF32, DType::kF64, DType::kBF16}, sizes, {ReduceOp::kSum}, tally);
  }
  expect_identical_on_all_ranks(tally);
}

// Around auto's switch from recursive doubling to the ring (small_bytes x (n-1)).
TEST(AllreduceAuto, SizesAroundTheAlgorithmSwitch) {
  HostCommunicator comm(world().group(), test_options(AllreduceAlgo::kAuto));
  const int64_t limit = static_cast<int64_t>(comm.options().small_bytes) *
                        std::max(1, world().size() - 1);
  Tally tally;
  run_matrix(comm, "algo=auto", Fill::kRandom, {DType::kF32},
             {limit / 4 - 1, limit / 4, limit / 4 + 1}, {ReduceOp::kSum}, tally);
  run_matrix(comm, "algo=auto", Fill::kRandom, {DType::kBF16},
             {limit / 2 - 1, limit / 2, limit / 2 + 1}, {ReduceOp::kSum}, tally);
  expect_identical_on_all_ranks(tally);
}

TEST(AllreduceAuto, ChoosesRecursiveDoublingBelowTheLimitThenRing) {
  if (world().size() < 2) GTEST_SKIP() << "a 1-rank world needs no algorithm";
  HostCommunicator comm(world().group(), test_options(AllreduceAlgo::kAuto));
  const size_t limit = comm.options().small_bytes * static_cast<size_t>(world().size() - 1);
  EXPECT_EQ(comm.choose_allreduce(4), AllreduceAlgo::kRecursiveDoubling);
  EXPECT_EQ(comm.choose_allreduce(limit - 1), AllreduceAlgo::kRecursiveDoubling);
  EXPECT_EQ(comm.choose_allreduce(limit), AllreduceAlgo::kRing);
  EXPECT_EQ(comm.choose_allreduce(size_t{1} << 30), AllreduceAlgo::kRing);
}

}  // namespace
}  // namespace etr::testing
