// BucketReducer (parallel/bucket_reducer.h), the step seam's communication, at np 1-4:
// - kAllreduce: every rank's buffer becomes the sum over ranks; kReduceScatter: rank r's
//   block r of each bucket becomes the sum of block r. The reference is the sum in double
//   precision of every rank's values (each rank can compute them all: they are a function
//   of rank and index); tolerance 1e-6 relative (float sums of <= 4 terms of size ~1);
// - the allreduce leaves every rank with bitwise the same buffer (MPI's own allreduce of
//   the bytes' max and min as the check);
// - the before-launch hook sees each bucket once, in index order, on the caller's thread,
//   with this rank's local values;
// - a reduce-scatter over a bucket that does not split into equal blocks is refused.
#include "parallel/bucket_reducer.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "collectives/host_communicator.h"
#include "mpi/mpi_test_main.h"
#include "runtime/error.h"

namespace etr {
namespace {

using testing::world;

// 5 layers of 96 elements (no padding): 480 elements; with a first bucket of 96 elements
// and then 192, every bucket splits into 1, 2, 3 or 4 equal blocks.
ParamLayout layout_480() {
  ParamLayout l;
  for (int i = 0; i < 5; ++i) {
    std::string name = "t";  // (not "t" + to_string: GCC 12's -Wrestrict misfires on it)
    name += std::to_string(i);
    l.add(name, Shape{96}, i, true);
  }
  return l;
}

BucketOptions options(BucketOp op) {
  BucketOptions o;
  o.first_bucket_bytes = 96 * sizeof(float);
  o.bucket_cap_bytes = 192 * sizeof(float);
  o.op = op;
  return o;
}

float value(int rank, int64_t i) { return static_cast<float>(std::sin(0.37 * i + 1.3 * rank)); }

std::vector<float> local_grads(int64_t n) {
  std::vector<float> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = value(world().rank(), i);
  return g;
}

double reference_sum(int64_t i) {
  double s = 0;
  for (int r = 0; r < world().size(); ++r) s += value(r, i);
  return s;
}

// Runs one step of the reducer, reporting layers n-1..0.
void run_step(BucketReducer& reducer, int layers) {
  reducer.begin_step();
  for (int l = layers - 1; l >= 0; --l) reducer.layer_ready(l);
  reducer.finish();
}

TEST(BucketReducer, AllreduceSumsEveryBucketIdenticallyOnEveryRank) {
  const ParamLayout layout = layout_480();
  std::vector<float> g = local_grads(layout.numel());
  HostCommunicator comm(world().group());
  BucketReducer reducer(layout, g.data(), comm, options(BucketOp::kAllreduce));
  ASSERT_EQ(reducer.buckets().size(), 3u);
  run_step(reducer, layout.num_layers());
  for (int64_t i = 0; i < layout.numel(); ++i) {
    const double want = reference_sum(i);
    ASSERT_NEAR(g[i], want, 1e-6 * std::max(1.0, std::fabs(want))) << "element " << i;
  }
  std::vector<float> lo(g.size()), hi(g.size());
  MPI_Allreduce(g.data(), lo.data(), static_cast<int>(g.size()), MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(g.data(), hi.data(), static_cast<int>(g.size()), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, g);
  EXPECT_EQ(hi, g);
}

TEST(BucketReducer, ReduceScatterLeavesEachRankItsBlockOfTheSum) {
  const ParamLayout layout = layout_480();
  std::vector<float> g = local_grads(layout.numel());
  HostCommunicator comm(world().group());
  BucketReducer reducer(layout, g.data(), comm, options(BucketOp::kReduceScatter));
  run_step(reducer, layout.num_layers());
  const int n = world().size(), r = world().rank();
  for (const Bucket& b : reducer.buckets()) {
    const int64_t block = (b.end - b.begin) / n;
    for (int64_t i = b.begin + r * block; i < b.begin + (r + 1) * block; ++i) {
      const double want = reference_sum(i);
      ASSERT_NEAR(g[i], want, 1e-6 * std::max(1.0, std::fabs(want)))
          << "element " << i << " of bucket [" << b.begin << ", " << b.end << ")";
    }
  }
}

TEST(BucketReducer, TheLaunchHookSeesEachBucketOnceInOrderWithLocalValues) {
  const ParamLayout layout = layout_480();
  const std::vector<float> original = local_grads(layout.numel());
  for (BucketOp op : {BucketOp::kAllreduce, BucketOp::kReduceScatter}) {
    std::vector<float> g = original;
    HostCommunicator comm(world().group());
    BucketReducer reducer(layout, g.data(), comm, options(op));
    std::vector<size_t> seen;
    bool all_local = true, caller_thread = true;
    const std::thread::id me = std::this_thread::get_id();
    reducer.set_before_launch([&](size_t index, const Bucket& range, const float* local) {
      seen.push_back(index);
      caller_thread = caller_thread && std::this_thread::get_id() == me;
      for (int64_t i = range.begin; i < range.end; ++i) {
        all_local = all_local && local[i - range.begin] == original[i];
      }
    });
    for (int step = 0; step < 2; ++step) {
      for (int64_t i = 0; i < layout.numel(); ++i) g[i] = original[i];
      seen.clear();
      run_step(reducer, layout.num_layers());
      EXPECT_EQ(seen, (std::vector<size_t>{0, 1, 2})) << "step " << step;
    }
    EXPECT_TRUE(all_local) << "the hook saw values that were not this rank's own";
    EXPECT_TRUE(caller_thread) << "the hook ran on another thread";
  }
}

TEST(BucketReducer, ReduceScatterRefusesBucketsThatDoNotSplitEvenly) {
  if (world().size() == 1) GTEST_SKIP() << "every bucket splits into 1 block";
  ParamLayout layout;
  layout.add("a", Shape{48}, 0, true);
  layout.add("b", Shape{48}, 1, true);
  std::vector<float> g(layout.numel(), 1.0f);
  HostCommunicator comm(world().group());
  BucketOptions o = options(BucketOp::kReduceScatter);
  o.first_bucket_bytes = 37 * sizeof(float);  // 37 elements: prime, splits over no n > 1
  EXPECT_THROW(BucketReducer(layout, g.data(), comm, o), InvalidArgument);
  o.op = BucketOp::kAllreduce;  // an allreduce takes any length
  EXPECT_NO_THROW(BucketReducer(layout, g.data(), comm, o));
}

}  // namespace
}  // namespace etr
