// cuda::gelu_* and cuda::residual_* against the CPU kernels (runtime/kernels/cpu/gelu.h,
// residual.h) at relative L2 1e-5 (residual also bit for bit: one IEEE addition each), for
// element counts 1, 7, B * T * C = 3 * 37 * 72, a GPT-sized 4 * 128 * 256 * 4, and one past
// a single launch's 8192 x 256 threads (so the grid-stride loop runs twice): outputs
// poisoned with NaN, in-place forwards, gradients pre-filled so that += is checked, the
// aliased residual gradient (+= 2 dout), repeated runs bitwise identical, n = 0 touching
// nothing, and negative n throwing.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/kernel_test_util.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/gelu.h"
#include "runtime/kernels/cuda/residual.h"
#include "runtime/kernels/kernels.h"

namespace etr {
namespace {

using testing::DeviceArray;
using testing::expect_close;
using testing::expect_same_bits;
using testing::random_floats;
using testing::stream;

const int64_t kCounts[] = {1, 7, 3 * 37 * 72, 4 * 128 * 256 * 4, 8192 * 256 + 13};

// ---- gelu ----

TEST(CudaGelu, ForwardMatchesCpu) {
  ETR_REQUIRE_GPU();
  for (int64_t n : kCounts) {
    SCOPED_TRACE("n " + std::to_string(n));
    // [-5, 5): through the curved middle and into tanh's saturation.
    const std::vector<float> x = random_floats(n, 1000 + n, 5.0f);
    std::vector<float> want(x.size());
    cpu::gelu_forward<float>(want.data(), x.data(), n);

    DeviceArray<float> d_x(x);
    auto d_out = DeviceArray<float>::poisoned(n);
    cuda::gelu_forward(d_out.data(), d_x.data(), n, stream());
    std::vector<float> got = d_out.download();
    expect_close(got, want, 1e-5, "gelu forward");
    expect_same_bits(d_x.download(), x, "gelu forward input");

    auto d_again = DeviceArray<float>::poisoned(n);
    cuda::gelu_forward(d_again.data(), d_x.data(), n, stream());
    expect_same_bits(d_again.download(), got, "gelu forward rerun");

    // In place: out is inp.
    cuda::gelu_forward(d_x.data(), d_x.data(), n, stream());
    expect_same_bits(d_x.download(), got, "gelu forward in place");
  }
}

TEST(CudaGelu, BackwardMatchesCpuAndAccumulates) {
  ETR_REQUIRE_GPU();
  for (int64_t n : kCounts) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> x = random_floats(n, 2000 + n, 5.0f);
    const std::vector<float> dout = random_floats(n, 3000 + n);
    const std::vector<float> dinp0 = random_floats(n, 4000 + n);
    std::vector<float> want = dinp0;
    cpu::gelu_backward<float>(want.data(), x.data(), dout.data(), n);

    DeviceArray<float> d_x(x), d_dout(dout), d_dinp(dinp0);
    cuda::gelu_backward(d_dinp.data(), d_x.data(), d_dout.data(), n, stream());
    std::vector<float> got = d_dinp.download();
    expect_close(got, want, 1e-5, "gelu backward");

    DeviceArray<float> d_again(dinp0);
    cuda::gelu_backward(d_again.data(), d_x.data(), d_dout.data(), n, stream());
    expect_same_bits(d_again.download(), got, "gelu backward rerun");
  }
}

TEST(CudaGelu, EmptyAndNegativeCounts) {
  ETR_REQUIRE_GPU();
  const std::vector<float> fill = random_floats(16, 5000);
  DeviceArray<float> a(fill), b(random_floats(16, 5001)), c(random_floats(16, 5002));
  cuda::gelu_forward(a.data(), b.data(), 0, stream());
  cuda::gelu_backward(a.data(), b.data(), c.data(), 0, stream());
  expect_same_bits(a.download(), fill, "gelu with n 0");
  EXPECT_THROW(cuda::gelu_forward(a.data(), b.data(), -1, stream()), InvalidArgument);
  EXPECT_THROW(cuda::gelu_backward(a.data(), b.data(), c.data(), -1, stream()), InvalidArgument);
}

// ---- residual ----

TEST(CudaResidual, ForwardMatchesCpuAndRunsInPlace) {
  ETR_REQUIRE_GPU();
  for (int64_t n : kCounts) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> x1 = random_floats(n, 6000 + n), x2 = random_floats(n, 7000 + n);
    std::vector<float> want(x1.size());
    cpu::residual_forward<float>(want.data(), x1.data(), x2.data(), n);

    DeviceArray<float> d_x1(x1), d_x2(x2);
    auto d_out = DeviceArray<float>::poisoned(n);
    cuda::residual_forward(d_out.data(), d_x1.data(), d_x2.data(), n, stream());
    std::vector<float> got = d_out.download();
    expect_close(got, want, 1e-5, "residual forward");
    expect_same_bits(got, want, "residual forward against the CPU");

    // In place into either input.
    cuda::residual_forward(d_x1.data(), d_x1.data(), d_x2.data(), n, stream());
    expect_same_bits(d_x1.download(), want, "residual forward into inp1");
    d_x1.upload(x1);
    cuda::residual_forward(d_x2.data(), d_x1.data(), d_x2.data(), n, stream());
    expect_same_bits(d_x2.download(), want, "residual forward into inp2");
  }
}

TEST(CudaResidual, BackwardMatchesCpuAndAccumulates) {
  ETR_REQUIRE_GPU();
  for (int64_t n : kCounts) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> dout = random_floats(n, 8000 + n);
    const std::vector<float> d1 = random_floats(n, 9000 + n), d2 = random_floats(n, 10000 + n);
    std::vector<float> want1 = d1, want2 = d2;
    cpu::residual_backward<float>(want1.data(), want2.data(), dout.data(), n);

    DeviceArray<float> d_dout(dout), d_d1(d1), d_d2(d2);
    cuda::residual_backward(d_d1.data(), d_d2.data(), d_dout.data(), n, stream());
    std::vector<float> got1 = d_d1.download(), got2 = d_d2.download();
    expect_close(got1, want1, 1e-5, "residual dinp1");
    expect_close(got2, want2, 1e-5, "residual dinp2");
    expect_same_bits(got1, want1, "residual dinp1 against the CPU");
    expect_same_bits(got2, want2, "residual dinp2 against the CPU");
    expect_same_bits(d_dout.download(), dout, "residual dout unchanged");

    d_d1.upload(d1);
    d_d2.upload(d2);
    cuda::residual_backward(d_d1.data(), d_d2.data(), d_dout.data(), n, stream());
    expect_same_bits(d_d1.download(), got1, "residual dinp1 rerun");
    expect_same_bits(d_d2.download(), got2, "residual dinp2 rerun");
  }
}

// dinp1 == dinp2 (both branches' gradients into one buffer): += 2 dout.
TEST(CudaResidual, BackwardIntoOneBufferAddsTwice) {
  ETR_REQUIRE_GPU();
  for (int64_t n : kCounts) {
    SCOPED_TRACE("n " + std::to_string(n));
    const std::vector<float> dout = random_floats(n, 11000 + n);
    const std::vector<float> d0 = random_floats(n, 12000 + n);
    std::vector<float> want = d0;
    cpu::residual_backward<float>(want.data(), want.data(), dout.data(), n);

    DeviceArray<float> d_dout(dout), d_d(d0);
    cuda::residual_backward(d_d.data(), d_d.data(), d_dout.data(), n, stream());
    std::vector<float> got = d_d.download();
    expect_close(got, want, 1e-5, "residual aliased dinp");
    expect_same_bits(got, want, "residual aliased dinp against the CPU");
  }
}

TEST(CudaResidual, EmptyAndNegativeCounts) {
  ETR_REQUIRE_GPU();
  const std::vector<float> fill = random_floats(16, 13000);
  DeviceArray<float> a(fill), b(fill), c(random_floats(16, 13001));
  cuda::residual_forward(a.data(), c.data(), c.data(), 0, stream());
  cuda::residual_backward(a.data(), b.data(), c.data(), 0, stream());
  cuda::residual_backward(a.data(), a.data(), c.data(), 0, stream());
  expect_same_bits(a.download(), fill, "residual with n 0 (a)");
  expect_same_bits(b.download(), fill, "residual with n 0 (b)");
  EXPECT_THROW(cuda::residual_forward(a.data(), b.data(), c.data(), -1, stream()), InvalidArgument);
  EXPECT_THROW(cuda::residual_backward(a.data(), b.data(), c.data(), -1, stream()),
               InvalidArgument);
}

}  // namespace
}  // namespace etr
