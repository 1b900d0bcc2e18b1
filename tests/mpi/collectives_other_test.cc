// HostCommunicator::reduce_scatter, allgather and broadcast over the world group, at
// every world size ctest runs: every op x dtype, block sizes 0, 1, 3, 1000 and 65537 (a
// ring path of several chunks), in place and out of place, every root.
//
// Shapes (communicator.h), n = size(), r = rank():
//   reduce_scatter  in [n * M] -> out [M] = block r of the reduction (in place: out is
//                   block r of in)
//   allgather       in [M] -> out [n * M], block q = rank q's in (in place: in is
//                   block r of out)
//   broadcast       inout [N] = root's inout
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "collectives/host_communicator.h"
#include "mpi/collectives_test_util.h"
#include "mpi/mpi_test_main.h"
#include "runtime/error.h"

namespace etr::testing {
namespace {

constexpr int64_t kBlockSizes[] = {0, 1, 3, 1000, 65537};

uint64_t salt_for(DType t, Fill fill, int64_t count, uint64_t what) {
  return static_cast<uint64_t>(count) * 131 + static_cast<uint64_t>(t) * 7 +
         (fill == Fill::kRandom ? 3 : 0) + what * 1000003;
}

std::vector<unsigned char> bytes_of(const Buffer& b) {
  const auto* p = static_cast<const unsigned char*>(b.data());
  return {p, p + b.nbytes()};
}

// ---------------------------------------------------------------------------------------
// reduce_scatter

void reduce_scatter_case(HostCommunicator& comm, const std::string& extra, DType t, Fill fill,
                         ReduceOp op, bool in_place, int64_t m) {
  const int r = comm.rank(), np = comm.size();
  const std::string name = label("reduce_scatter", op, t, m, in_place, extra, np);
  const std::vector<double> inputs = all_inputs(t, fill, salt_for(t, fill, m, 1), np, np * m);
  Buffer in(t, np * m), out(t, in_place ? 0 : m);
  in.fill_from(inputs, r * np * m);
  const std::vector<unsigned char> in_before = bytes_of(in);
  std::exception_ptr error = run_op([&] {
    return comm.reduce_scatter(in.view(), in_place ? in.view(r * m, m) : out.view(), op);
  });
  if (t == DType::kI32 && op == ReduceOp::kAvg) {
    EXPECT_TRUE(holds<InvalidArgument>(error))
        << name << ": avg on i32 must be rejected with InvalidArgument; got: " << what(error);
    return;
  }
  ASSERT_FALSE(error) << name << " threw: " << what(error);
  const void* result =
      in_place ? static_cast<const unsigned char*>(in.data()) + r * m * dtype_size(t) : out.data();
  const Reference ref = reduce_reference(inputs, np, np * m, r * m, m, op);
  EXPECT_EQ(compare(t, result, ref, tolerance(t, fill, op, np)), "") << name << " on rank " << r;
  EXPECT_TRUE(in.guard_intact()) << name << ": wrote past the end of the input";
  if (!in_place) {
    EXPECT_TRUE(out.guard_intact()) << name << ": wrote past the end of the output";
    EXPECT_TRUE(bytes_of(in) == in_before) << name << ": an out-of-place op modified its input";
  }
}

TEST(ReduceScatter, EveryOpDtypeAndBlockSizeIsExact) {
  HostCommunicator comm(world().group(), test_options());
  for (DType t : kAllDTypes)
    for (int64_t m : kBlockSizes)
      for (ReduceOp op : kAllOps)
        for (bool in_place : {true, false})
          reduce_scatter_case(comm, "", t, Fill::kExact, op, in_place, m);
}

TEST(ReduceScatter, RandomValuesWithinTolerance) {
  HostCommunicator comm(world().group(), test_options());
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16})
    for (int64_t m : {3, 1000, 65537})
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg})
        for (bool in_place : {true, false})
          reduce_scatter_case(comm, "random", t, Fill::kRandom, op, in_place, m);
}

TEST(ReduceScatter, SmallChunksDepthOne) {
  CommOptions o = test_options();
  o.chunk_bytes = 4096;
  o.depth = 1;
  HostCommunicator comm(world().group(), o);
  for (DType t : {DType::kF32, DType::kBF16, DType::kI32})
    for (int64_t m : {1000, 10007})
      for (bool in_place : {true, false})
        reduce_scatter_case(comm, "chunk=4096, depth=1", t, Fill::kRandom, ReduceOp::kSum, in_place,
                            m);
}

// ---------------------------------------------------------------------------------------
// allgather

void allgather_case(HostCommunicator& comm, const std::string& extra, DType t, bool in_place,
                    int64_t m) {
  const int r = comm.rank(), np = comm.size();
  const std::string name = label("allgather", t, m, in_place, extra, np);
  const std::vector<double> inputs =
      all_inputs(t, Fill::kRandom, salt_for(t, Fill::kRandom, m, 2), np, m);
  Buffer in(t, in_place ? 0 : m), out(t, np * m);
  out.fill_sentinel();
  std::vector<unsigned char> in_before;
  if (in_place) {
    for (int64_t i = 0; i < m; ++i) store(t, out.data(), r * m + i, inputs[r * m + i]);
  } else {
    in.fill_from(inputs, r * m);
    in_before = bytes_of(in);
  }
  std::exception_ptr error =
      run_op([&] { return comm.allgather(in_place ? out.view(r * m, m) : in.view(), out.view()); });
  ASSERT_FALSE(error) << name << " threw: " << what(error);
  EXPECT_EQ(compare_exact(t, out.data(), inputs, 0, np * m), "") << name << " on rank " << r;
  EXPECT_TRUE(out.guard_intact()) << name << ": wrote past the end of the output";
  if (!in_place) {
    EXPECT_TRUE(in.guard_intact()) << name << ": wrote past the end of the input";
    EXPECT_TRUE(bytes_of(in) == in_before) << name << ": an out-of-place op modified its input";
  }
}

TEST(Allgather, EveryDtypeAndBlockSize) {
  HostCommunicator comm(world().group(), test_options());
  for (DType t : kAllDTypes)
    for (int64_t m : kBlockSizes)
      for (bool in_place : {true, false}) allgather_case(comm, "", t, in_place, m);
}

TEST(Allgather, SmallChunksDepthOne) {
  CommOptions o = test_options();
  o.chunk_bytes = 4096;
  o.depth = 1;
  HostCommunicator comm(world().group(), o);
  for (DType t : {DType::kF32, DType::kF16})
    for (int64_t m : {1000, 10007})
      for (bool in_place : {true, false})
        allgather_case(comm, "chunk=4096, depth=1", t, in_place, m);
}

// ---------------------------------------------------------------------------------------
// broadcast

TEST(Broadcast, FromEveryRootEveryDtype) {
  HostCommunicator comm(world().group(), test_options());
  const int r = comm.rank(), np = comm.size();
  for (DType t : kAllDTypes) {
    for (int64_t n : {0, 1, 1000, 300001}) {
      const std::vector<double> inputs =
          all_inputs(t, Fill::kRandom, salt_for(t, Fill::kRandom, n, 3), np, n);
      for (int root = 0; root < np; ++root) {
        const std::string name = label("broadcast", t, n, true, "root=" + std::to_string(root), np);
        Buffer buf(t, n);
        if (r == root) {
          buf.fill_from(inputs, root * n);
        } else {
          buf.fill_sentinel();
        }
        std::exception_ptr error = run_op([&] { return comm.broadcast(buf.view(), root); });
        if (error) {
          ADD_FAILURE() << name << " threw: " << what(error);
          continue;
        }
        EXPECT_EQ(compare_exact(t, buf.data(), inputs, root * n, n), "")
            << name << " on rank " << r;
        EXPECT_TRUE(buf.guard_intact()) << name << ": wrote past the end of the buffer";
      }
    }
  }
}

}  // namespace
}  // namespace etr::testing
