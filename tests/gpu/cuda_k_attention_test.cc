// cuda::attention_forward/backward against the CPU kernels (etr::cpu, float) on the same
// random inputs, in pedantic FP32 at relative L2 1e-5: out and att (poisoned beforehand;
// the causal upper triangle must be exactly 0), dq, dk and dv separately from a zero
// start, and the whole of dqkv accumulated into random values. Shapes with odd sizes
// (T = 37, hs = 18), T past the CPU's 64-row blocks, one head, T = 1; size 0 leaves every
// buffer untouched; bad sizes and too little scratch throw; two runs give the same bits.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gpu/kernel_test_util.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/attention.h"
#include "runtime/kernels/kernels.h"

namespace etr {
namespace {

using testing::DeviceArray;
using testing::expect_close;
using testing::random_floats;
using testing::stream;

struct Shape {
  int64_t B, T, C, NH;
};

std::string name(const Shape& s) {
  return "B " + std::to_string(s.B) + ", T " + std::to_string(s.T) + ", C " + std::to_string(s.C) +
         ", NH " + std::to_string(s.NH);
}

const Shape kShapes[] = {
    {2, 37, 72, 4},    // hs 18: nothing a multiple of 32
    {3, 5, 24, 1},     // one head
    {2, 1, 72, 4},     // one position: att is 1, dq and dk are 0
    {1, 200, 96, 3},   // T past three of the CPU's 64-row blocks, hs 32
    {2, 128, 256, 4},  // hs 64
};

struct CpuForward {
  std::vector<float> out, att;
};

CpuForward cpu_forward(const Shape& s, const std::vector<float>& qkv) {
  CpuForward r{std::vector<float>(static_cast<size_t>(s.B * s.T * s.C)),
               std::vector<float>(static_cast<size_t>(s.B * s.NH * s.T * s.T))};
  cpu::attention_forward<float>(r.out.data(), r.att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  return r;
}

// dqkv += the CPU's gradient.
void cpu_backward(const Shape& s, std::vector<float>& dqkv, const std::vector<float>& dout,
                  const std::vector<float>& qkv, const std::vector<float>& att) {
  std::vector<float> scratch(static_cast<size_t>(cpu::attention_backward_scratch_size(s.T, 1)));
  cpu::attention_backward<float>(dqkv.data(), scratch.data(), static_cast<int64_t>(scratch.size()),
                                 dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH);
}

// dqkv += the GPU's gradient; scratch poisoned, so a product that read it would show.
std::vector<float> gpu_backward(const Shape& s, const std::vector<float>& dqkv,
                                const std::vector<float>& dout, const std::vector<float>& qkv,
                                const std::vector<float>& att) {
  DeviceArray<float> d_dqkv(dqkv), d_dout(dout), d_qkv(qkv), d_att(att);
  const int64_t n = cuda::attention_backward_scratch_size(s.B, s.T, s.C, s.NH);
  EXPECT_EQ(n, s.NH * s.T * s.T);
  auto scratch = DeviceArray<float>::poisoned(n);
  cuda::attention_backward(d_dqkv.data(), scratch.data(), n, d_dout.data(), d_qkv.data(),
                           d_att.data(), s.B, s.T, s.C, s.NH, stream());
  return d_dqkv.download();
}

// Columns [part C, (part + 1) C) of each row of a [B, T, 3C] buffer: q, k or v.
std::vector<float> part_of(const std::vector<float>& qkv, const Shape& s, int part) {
  std::vector<float> r;
  r.reserve(static_cast<size_t>(s.B * s.T * s.C));
  for (int64_t row = 0; row < s.B * s.T; ++row) {
    const float* p = qkv.data() + row * 3 * s.C + part * s.C;
    r.insert(r.end(), p, p + s.C);
  }
  return r;
}

TEST(CudaAttention, ForwardMatchesCpu) {
  ETR_REQUIRE_GPU();
  uint64_t seed = 1;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const std::vector<float> qkv = random_floats(s.B * s.T * 3 * s.C, seed++);
    const CpuForward want = cpu_forward(s, qkv);
    DeviceArray<float> d_qkv(qkv);
    auto d_out = DeviceArray<float>::poisoned(s.B * s.T * s.C);
    auto d_att = DeviceArray<float>::poisoned(s.B * s.NH * s.T * s.T);
    cuda::attention_forward(d_out.data(), d_att.data(), d_qkv.data(), s.B, s.T, s.C, s.NH,
                            stream());
    const std::vector<float> att = d_att.download();
    expect_close(d_out.download(), want.out, 1e-5, "attention out");
    expect_close(att, want.att, 1e-5, "attention att");
    int64_t nonzero_above = 0;  // NaN poison left behind counts too
    for (int64_t bh = 0; bh < s.B * s.NH; ++bh) {
      for (int64_t t = 0; t < s.T; ++t) {
        for (int64_t u = t + 1; u < s.T; ++u) {
          if (!(att[static_cast<size_t>((bh * s.T + t) * s.T + u)] == 0.0f)) ++nonzero_above;
        }
      }
    }
    EXPECT_EQ(nonzero_above, 0) << "entries above the diagonal of att that are not exactly 0";
  }
}

// From a zero start: each of dq, dk, dv on its own, so that a small one is not hidden
// behind a larger one.
TEST(CudaAttention, BackwardMatchesCpuPerPart) {
  ETR_REQUIRE_GPU();
  uint64_t seed = 100;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const std::vector<float> qkv = random_floats(s.B * s.T * 3 * s.C, seed++);
    const std::vector<float> dout = random_floats(s.B * s.T * s.C, seed++);
    const std::vector<float> att = cpu_forward(s, qkv).att;
    std::vector<float> want(static_cast<size_t>(s.B * s.T * 3 * s.C), 0.0f);
    cpu_backward(s, want, dout, qkv, att);
    const std::vector<float> got =
        gpu_backward(s, std::vector<float>(want.size(), 0.0f), dout, qkv, att);
    const char* parts[] = {"dq", "dk", "dv"};
    for (int part = 0; part < 3; ++part) {
      expect_close(part_of(got, s, part), part_of(want, s, part), 1e-5, parts[part]);
    }
  }
}

// Into random values on both sides: the gradient is added, not assigned.
TEST(CudaAttention, BackwardAccumulates) {
  ETR_REQUIRE_GPU();
  uint64_t seed = 200;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const std::vector<float> qkv = random_floats(s.B * s.T * 3 * s.C, seed++);
    const std::vector<float> dout = random_floats(s.B * s.T * s.C, seed++);
    const std::vector<float> pre = random_floats(s.B * s.T * 3 * s.C, seed++);
    const std::vector<float> att = cpu_forward(s, qkv).att;
    std::vector<float> want = pre;
    cpu_backward(s, want, dout, qkv, att);
    expect_close(gpu_backward(s, pre, dout, qkv, att), want, 1e-5, "dqkv accumulated");
  }
}

// The GPU backward on the GPU forward's att, twice each: the same bits.
TEST(CudaAttention, Deterministic) {
  ETR_REQUIRE_GPU();
  for (const Shape& s : {Shape{2, 37, 72, 4}, Shape{2, 128, 256, 4}}) {
    SCOPED_TRACE(name(s));
    DeviceArray<float> d_qkv(random_floats(s.B * s.T * 3 * s.C, 7));
    const std::vector<float> dout = random_floats(s.B * s.T * s.C, 8);
    const std::vector<float> pre = random_floats(s.B * s.T * 3 * s.C, 9);
    std::vector<float> outs[2], atts[2], grads[2];
    for (int run = 0; run < 2; ++run) {
      auto d_out = DeviceArray<float>::poisoned(s.B * s.T * s.C);
      auto d_att = DeviceArray<float>::poisoned(s.B * s.NH * s.T * s.T);
      cuda::attention_forward(d_out.data(), d_att.data(), d_qkv.data(), s.B, s.T, s.C, s.NH,
                              stream());
      outs[run] = d_out.download();
      atts[run] = d_att.download();
      grads[run] = gpu_backward(s, pre, dout, d_qkv.download(), atts[run]);
    }
    EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(atts[0].data(), atts[1].data(), atts[0].size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * sizeof(float)));
    EXPECT_NE(0, std::memcmp(grads[0].data(), pre.data(), pre.size() * sizeof(float)))
        << "the backward changed nothing";
  }
}

// B = 0 or T = 0: nothing is written (buffers sized for B 1, T 5 hold random values), and
// no scratch is needed.
TEST(CudaAttention, SizeZeroLeavesBuffersUntouched) {
  ETR_REQUIRE_GPU();
  const int64_t T = 5, C = 24, NH = 2;
  const std::vector<float> out0 = random_floats(T * C, 1), att0 = random_floats(NH * T * T, 2),
                           qkv = random_floats(T * 3 * C, 3), dqkv0 = random_floats(T * 3 * C, 4);
  DeviceArray<float> d_out(out0), d_att(att0), d_qkv(qkv), d_dqkv(dqkv0), d_dout(out0);
  for (const auto& [B, TT] : {std::pair<int64_t, int64_t>{0, T}, {1, 0}}) {
    EXPECT_EQ(cuda::attention_backward_scratch_size(B, TT, C, NH), 0);
    cuda::attention_forward(d_out.data(), d_att.data(), d_qkv.data(), B, TT, C, NH, stream());
    cuda::attention_backward(d_dqkv.data(), nullptr, 0, d_dout.data(), d_qkv.data(), d_att.data(),
                             B, TT, C, NH, stream());
  }
  EXPECT_EQ(d_out.download(), out0);
  EXPECT_EQ(d_att.download(), att0);
  EXPECT_EQ(d_dqkv.download(), dqkv0);
}

TEST(CudaAttention, RejectsBadSizesAndShortScratch) {
  ETR_REQUIRE_GPU();
  const Shape s{2, 7, 24, 2};
  DeviceArray<float> d_qkv(random_floats(s.B * s.T * 3 * s.C, 1));
  DeviceArray<float> d_dout(random_floats(s.B * s.T * s.C, 2));
  const std::vector<float> dqkv0 = random_floats(s.B * s.T * 3 * s.C, 3);
  DeviceArray<float> d_dqkv(dqkv0);
  auto d_out = DeviceArray<float>::poisoned(s.B * s.T * s.C);
  auto d_att = DeviceArray<float>::poisoned(s.B * s.NH * s.T * s.T);
  const int64_t need = cuda::attention_backward_scratch_size(s.B, s.T, s.C, s.NH);
  auto scratch = DeviceArray<float>::poisoned(need);
  // C = 24 over 5 heads, and a negative T.
  EXPECT_THROW(cuda::attention_backward_scratch_size(s.B, s.T, s.C, 5), InvalidArgument);
  EXPECT_THROW(
      cuda::attention_forward(d_out.data(), d_att.data(), d_qkv.data(), s.B, s.T, s.C, 5, stream()),
      InvalidArgument);
  EXPECT_THROW(cuda::attention_forward(d_out.data(), d_att.data(), d_qkv.data(), s.B, -1, s.C, s.NH,
                                       stream()),
               InvalidArgument);
  EXPECT_THROW(cuda::attention_backward(d_dqkv.data(), scratch.data(), need, d_dout.data(),
                                        d_qkv.data(), d_att.data(), s.B, s.T, s.C, 5, stream()),
               InvalidArgument);
  EXPECT_THROW(cuda::attention_backward(d_dqkv.data(), scratch.data(), need - 1, d_dout.data(),
                                        d_qkv.data(), d_att.data(), s.B, s.T, s.C, s.NH, stream()),
               InvalidArgument);
  EXPECT_THROW(cuda::attention_backward(d_dqkv.data(), nullptr, need, d_dout.data(), d_qkv.data(),
                                        d_att.data(), s.B, s.T, s.C, s.NH, stream()),
               InvalidArgument);
  EXPECT_EQ(d_dqkv.download(), dqkv0) << "a rejected backward wrote to dqkv";
}

}  // namespace
}  // namespace etr
