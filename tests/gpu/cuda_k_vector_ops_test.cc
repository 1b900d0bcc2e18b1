// cuda::fill, copy, add_inplace and sum against the CPU kernels of
// runtime/kernels/cpu/elementwise.h. fill, copy and add_inplace must match bitwise (one
// exact or correctly rounded operation per element), for counts 1, 7, 1000 and 3000017 (a
// prime beyond one launch's 8192 x 256 threads, so the grid-stride loops run more than
// once), and never write past n (guard elements stay NaN). sum is checked against a
// compensated long double sum within 1e-12 of sum |x|, into a poisoned device scalar, and
// must be bitwise identical run to run; n = 0 gives 0. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/kernel_test_util.h"
#include "runtime/error.h"
#include "runtime/kernels/cpu/elementwise.h"
#include "runtime/kernels/cuda/vector_ops.h"

namespace etr {
namespace {

using testing::DeviceArray;
using testing::expect_same_bits;
using testing::random_floats;
using testing::stream;

constexpr int64_t kGuard = 5;  // poisoned elements after the n a kernel may write
const int64_t kCounts[] = {1, 7, 1000, 3000017};

// `host` followed by kGuard NaNs (all bits set, as DeviceArray::poisoned writes).
std::vector<float> with_guard(std::vector<float> host) {
  float nan;
  const uint32_t bits = 0xFFFFFFFFu;
  std::memcpy(&nan, &bits, sizeof(nan));
  host.insert(host.end(), kGuard, nan);
  return host;
}

TEST(CudaVectorOps, FillMatchesCpu) {
  ETR_REQUIRE_GPU();
  for (int64_t n : kCounts) {
    DeviceArray<float> d_out = DeviceArray<float>::poisoned(n + kGuard);
    cuda::fill(d_out.data(), -0.375f, n, stream());
    std::vector<float> want(n);
    cpu::fill<float>(want.data(), -0.375f, n);
    expect_same_bits(d_out.download(), with_guard(want), "fill n " + std::to_string(n));
  }
}

TEST(CudaVectorOps, CopyMatchesCpu) {
  ETR_REQUIRE_GPU();
  for (int64_t n : kCounts) {
    const std::vector<float> inp = random_floats(n, 7 + n);
    DeviceArray<float> d_inp(inp), d_out = DeviceArray<float>::poisoned(n + kGuard);
    cuda::copy(d_out.data(), d_inp.data(), n, stream());
    cuda::copy(d_inp.data(), d_inp.data(), n, stream());  // onto itself: nothing changes
    std::vector<float> want(n);
    cpu::copy<float>(want.data(), inp.data(), n);
    expect_same_bits(d_out.download(), with_guard(want), "copy n " + std::to_string(n));
    expect_same_bits(d_inp.download(), inp, "copy onto itself n " + std::to_string(n));
  }
}

TEST(CudaVectorOps, AddInplaceMatchesCpu) {
  ETR_REQUIRE_GPU();
  for (int64_t n : kCounts) {
    const std::vector<float> inp = random_floats(n, 11 + n);
    std::vector<float> want = random_floats(n, 13 + n, 3.0f);  // prefilled: accumulate into
    DeviceArray<float> d_inp(inp), d_out(with_guard(want));
    cuda::add_inplace(d_out.data(), d_inp.data(), n, stream());
    cpu::add_inplace<float>(want.data(), inp.data(), n);
    expect_same_bits(d_out.download(), with_guard(want), "add_inplace n " + std::to_string(n));

    // out == inp: every element doubled.
    std::vector<float> twice = inp;
    cpu::add_inplace<float>(twice.data(), inp.data(), n);
    cuda::add_inplace(d_inp.data(), d_inp.data(), n, stream());
    expect_same_bits(d_inp.download(), twice, "add_inplace onto itself n " + std::to_string(n));
  }
}

TEST(CudaVectorOps, ZeroCountLeavesBuffersUntouched) {
  ETR_REQUIRE_GPU();
  const std::vector<float> before = random_floats(9, 17), inp = random_floats(9, 19);
  DeviceArray<float> d_out(before), d_inp(inp);
  cuda::fill(d_out.data(), 1.0f, 0, stream());
  cuda::copy(d_out.data(), d_inp.data(), 0, stream());
  cuda::add_inplace(d_out.data(), d_inp.data(), 0, stream());
  expect_same_bits(d_out.download(), before, "n = 0");
}

TEST(CudaVectorOps, RejectsNegativeCounts) {
  ETR_REQUIRE_GPU();
  DeviceArray<float> d(4);
  DeviceArray<double> d_sum(1);
  EXPECT_THROW(cuda::fill(d.data(), 1.0f, -1, stream()), InvalidArgument);
  EXPECT_THROW(cuda::copy(d.data(), d.data(), -1, stream()), InvalidArgument);
  EXPECT_THROW(cuda::add_inplace(d.data(), d.data(), -1, stream()), InvalidArgument);
  EXPECT_THROW(cuda::sum(d_sum.data(), d.data(), -1, stream()), InvalidArgument);
}

double device_sum(const DeviceArray<float>& d_inp, int64_t n) {
  DeviceArray<double> d_out = DeviceArray<double>::poisoned(1);
  cuda::sum(d_out.data(), d_inp.data(), n, stream());
  return d_out.download()[0];
}

TEST(CudaVectorOps, SumIsAccurateAndDeterministic) {
  ETR_REQUIRE_GPU();
  // Up to 9000001: more than one unrolled sweep of the 8 x 1024 threads (8 loads each).
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{65537}, int64_t{1000003},
                    int64_t{9000001}}) {
    for (bool positive : {true, false}) {
      std::vector<float> x = random_floats(n, 23 + n, 2.0f);
      if (positive) {
        for (float& f : x) f = std::fabs(f) + 0.5f;  // like losses
      }
      double abs_sum = 0;
      for (float f : x) abs_sum += std::fabs(f);
      const std::string what = "sum n " + std::to_string(n) + (positive ? " positive" : " mixed");
      DeviceArray<float> d_x(x);
      const double got = device_sum(d_x, n);
      const double want = static_cast<double>(testing::compensated_sum(x));
      ASSERT_TRUE(std::isfinite(got)) << what;
      EXPECT_LE(std::fabs(got - want), 1e-12 * abs_sum)
          << what << ": got " << got << ", want " << want;
      const double cpu = cpu::sum<float>(x.data(), n);
      EXPECT_LE(std::fabs(got - cpu), 1e-9 * abs_sum) << what << ": CPU " << cpu;
      for (int run = 0; run < 2; ++run) {
        const double again = device_sum(d_x, n);
        EXPECT_EQ(std::memcmp(&again, &got, sizeof(double)), 0)
            << what << ": run " << run + 2 << " gave " << again << ", the first " << got;
      }
    }
  }
}

TEST(CudaVectorOps, SumOfNothingIsZero) {
  ETR_REQUIRE_GPU();
  DeviceArray<float> d_x(random_floats(3, 29));
  const double got = device_sum(d_x, 0);
  EXPECT_EQ(got, 0.0);
  EXPECT_FALSE(std::signbit(got));
}

}  // namespace
}  // namespace etr
