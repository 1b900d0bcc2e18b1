// Tests of runtime/kernels/cpu/attention.h: forward (output and saved probabilities)
// against a straightforward double-precision reference written here (naive loops, an
// explicit -inf mask), backward against central finite differences in double precision
// (kernel_test_util.h: h = 1e-5, tolerance 1e-6), float against double, at sizes with one
// block of query rows and with several (T > kAttentionRows), and the scratch contract.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/kernels/cpu/attention.h"
#include "runtime/kernels/cpu/threads.h"
#include "unit/kernel_test_util.h"

namespace etr::testing {
namespace {

struct Dims {
  int B, T, C, NH;
};

struct Reference {
  std::vector<double> out;  // [B, T, C]
  std::vector<double> att;  // [B, NH, T, T]
};

// The definition: per (b, h, t), scores against every key with the future masked to -inf,
// softmax, weighted sum of the values.
Reference reference_attention(const std::vector<double>& qkv, Dims d) {
  const int hs = d.C / d.NH;
  Reference r{std::vector<double>(static_cast<size_t>(d.B) * d.T * d.C),
              std::vector<double>(static_cast<size_t>(d.B) * d.NH * d.T * d.T)};
  auto at = [&](int b, int t, int part, int h, int i) {
    return qkv[(static_cast<size_t>(b) * d.T + t) * 3 * d.C + part * d.C + h * hs + i];
  };
  for (int b = 0; b < d.B; ++b) {
    for (int h = 0; h < d.NH; ++h) {
      for (int t = 0; t < d.T; ++t) {
        std::vector<double> score(d.T);
        for (int s = 0; s < d.T; ++s) {
          double dot = 0;
          for (int i = 0; i < hs; ++i) dot += at(b, t, 0, h, i) * at(b, s, 1, h, i);
          const bool masked = s > t;
          score[s] = masked ? -std::numeric_limits<double>::infinity() : dot / std::sqrt(hs);
        }
        double mx = -std::numeric_limits<double>::infinity();
        for (double v : score) mx = std::max(mx, v);
        double sum = 0;
        for (double& v : score) sum += (v = std::exp(v - mx));
        for (int s = 0; s < d.T; ++s) {
          const double p = score[s] / sum;
          r.att[((static_cast<size_t>(b) * d.NH + h) * d.T + t) * d.T + s] = p;
          for (int i = 0; i < hs; ++i) {
            r.out[(static_cast<size_t>(b) * d.T + t) * d.C + h * hs + i] += p * at(b, s, 2, h, i);
          }
        }
      }
    }
  }
  return r;
}

class AttentionDims : public ::testing::TestWithParam<Dims> {
 protected:
  void SetUp() override { cpu::set_num_threads(2); }
};

TEST_P(AttentionDims, ForwardMatchesReference) {
  const Dims d = GetParam();
  std::mt19937_64 rng(31);
  // scores of a few units: the softmax is neither uniform nor one-hot
  const auto qkv = random_vector(static_cast<size_t>(d.B) * d.T * 3 * d.C, rng, -2, 2);
  const auto ref = reference_attention(qkv, d);
  std::vector<double> out(ref.out.size(), 9.0), att(ref.att.size(), 9.0);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), d.B, d.T, d.C, d.NH);
  EXPECT_LT(rel_error(out, ref.out), 1e-13);
  EXPECT_LT(rel_error(att, ref.att), 1e-13);
  for (size_t i = 0; i < att.size(); ++i) {
    const size_t t = i / d.T % d.T, s = i % d.T;
    if (s > t) {
      ASSERT_EQ(att[i], 0.0) << "masked probability not exactly 0 at " << i;
    }
  }
  auto qkvf = to_float(qkv);
  std::vector<float> outf(out.size()), attf(att.size());
  cpu::attention_forward(outf.data(), attf.data(), qkvf.data(), d.B, d.T, d.C, d.NH);
  EXPECT_LT(rel_error(outf, ref.out), kFloatTol);
  EXPECT_LT(rel_error(attf, ref.att), kFloatTol);
}

TEST_P(AttentionDims, BackwardMatchesFiniteDifferences) {
  const Dims d = GetParam();
  std::mt19937_64 rng(32);
  auto qkv = random_vector(static_cast<size_t>(d.B) * d.T * 3 * d.C, rng, -2, 2);
  const auto R = random_vector(static_cast<size_t>(d.B) * d.T * d.C, rng);
  std::vector<double> out(R.size()), att(static_cast<size_t>(d.B) * d.NH * d.T * d.T);
  auto loss = [&] {
    cpu::attention_forward(out.data(), att.data(), qkv.data(), d.B, d.T, d.C, d.NH);
    return dot(out, R);
  };
  loss();  // att of the unperturbed qkv, for the backward
  const auto saved_att = att;
  const auto dqkv0 = random_vector(qkv.size(), rng);
  auto dqkv = dqkv0;
  std::vector<double> scratch(cpu::attention_backward_scratch_size(d.T, cpu::num_threads()));
  cpu::attention_backward(dqkv.data(), scratch.data(), static_cast<int64_t>(scratch.size()),
                          R.data(), qkv.data(), saved_att.data(), d.B, d.T, d.C, d.NH);
  const auto numeric = numeric_grad(qkv, loss);
  const std::string name = "attention qkv T=" + std::to_string(d.T);
  ETR_EXPECT_GRAD(name.c_str(), minus(dqkv, dqkv0), numeric);

  // one thread's worth of scratch: the same sums, on one thread
  auto dqkv_one = dqkv0;
  cpu::attention_backward(dqkv_one.data(), scratch.data(),
                          cpu::attention_backward_scratch_size(d.T, 1), R.data(), qkv.data(),
                          saved_att.data(), d.B, d.T, d.C, d.NH);
  EXPECT_EQ(dqkv_one, dqkv);

  // float against double
  auto qkvf = to_float(qkv), Rf = to_float(R), dqkvf = to_float(dqkv0);
  std::vector<float> outf(out.size()), attf(att.size()), scratchf(scratch.size());
  cpu::attention_forward(outf.data(), attf.data(), qkvf.data(), d.B, d.T, d.C, d.NH);
  cpu::attention_backward(dqkvf.data(), scratchf.data(), static_cast<int64_t>(scratchf.size()),
                          Rf.data(), qkvf.data(), attf.data(), d.B, d.T, d.C, d.NH);
  EXPECT_LT(rel_error(dqkvf, dqkv), kFloatTol);
}

// The brief's odd sizes (C = 12, NH = 3, T = 5, B = 2); one head; several query-row
// blocks (T = 67 and 130 > kAttentionRows = 64, the last block partial).
INSTANTIATE_TEST_SUITE_P(Sizes, AttentionDims,
                         ::testing::Values(Dims{2, 5, 12, 3}, Dims{1, 1, 4, 1}, Dims{3, 4, 6, 1},
                                           Dims{1, 67, 8, 2}, Dims{1, 130, 4, 2}));

TEST(Attention, RejectsBadSizesAndTooLittleScratch) {
  std::vector<double> buf(1000);
  EXPECT_THROW(cpu::attention_forward(buf.data(), buf.data(), buf.data(), 1, 2, 10, 3), Error);
  const int64_t need = cpu::attention_backward_scratch_size(5, 1);
  EXPECT_EQ(need, 5 * 5);
  EXPECT_THROW(cpu::attention_backward(buf.data(), buf.data(), need - 1, buf.data(), buf.data(),
                                       buf.data(), 1, 5, 6, 2),
               Error);
  EXPECT_EQ(cpu::attention_backward_scratch_size(1024, 2), 2 * cpu::kAttentionRows * 1024);
}

}  // namespace
}  // namespace etr::testing
