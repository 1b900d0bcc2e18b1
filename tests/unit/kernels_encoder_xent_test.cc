// Tests of runtime/kernels/cpu/encoder.h and softmax_xent.h: forwards against their
// definitions, backwards against central finite differences in double precision
// (kernel_test_util.h: h = 1e-5, tolerance 1e-6), float against double, repeated tokens,
// the padded vocabulary (never read: NaN there changes nothing), ignored targets, the
// in-place dlogits, extreme logits (+-100) against a double reference, and the errors for
// out-of-range tokens and targets.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "runtime/error.h"
#include "runtime/kernels/cpu/encoder.h"
#include "runtime/kernels/cpu/softmax_xent.h"
#include "runtime/kernels/cpu/threads.h"
#include "unit/kernel_test_util.h"

namespace etr::testing {
namespace {

constexpr int B = 2, T = 5, C = 12, V = 11, Vp = 16, maxT = 7;

// Tokens with repeats (within a row and across rows), including 0 and V - 1.
const std::vector<int32_t> kTokens = {3, 0, 3, 10, 7, /**/ 7, 7, 1, 10, 3};

TEST(Encoder, ForwardAndBackward) {
  cpu::set_num_threads(2);
  std::mt19937_64 rng(41);
  auto wte = random_vector(Vp * C, rng), wpe = random_vector(maxT * C, rng);
  const auto R = random_vector(B * T * C, rng);
  auto loss = [&] {
    std::vector<double> out(B * T * C);
    cpu::encoder_forward(out.data(), kTokens.data(), wte.data(), wpe.data(), B, T, C, V);
    return dot(out, R);
  };
  std::vector<double> out(B * T * C);
  cpu::encoder_forward(out.data(), kTokens.data(), wte.data(), wpe.data(), B, T, C, V);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        ASSERT_EQ(out[(b * T + t) * C + c], wte[kTokens[b * T + t] * C + c] + wpe[t * C + c]);

  const auto dwte0 = random_vector(wte.size(), rng), dwpe0 = random_vector(wpe.size(), rng);
  auto dwte = dwte0, dwpe = dwpe0;
  cpu::encoder_backward(dwte.data(), dwpe.data(), R.data(), kTokens.data(), B, T, C, V);
  // all Vp rows of wte (the padding rows and unused tokens get 0) and all maxT rows of wpe
  ETR_EXPECT_GRAD("encoder wte", minus(dwte, dwte0), numeric_grad(wte, loss));
  ETR_EXPECT_GRAD("encoder wpe", minus(dwpe, dwpe0), numeric_grad(wpe, loss));

  auto wtef = to_float(wte), wpef = to_float(wpe), Rf = to_float(R);
  auto dwtef = to_float(dwte0), dwpef = to_float(dwpe0);
  cpu::encoder_backward(dwtef.data(), dwpef.data(), Rf.data(), kTokens.data(), B, T, C, V);
  EXPECT_LT(rel_error(dwtef, dwte), kFloatTol);
  EXPECT_LT(rel_error(dwpef, dwpe), kFloatTol);
}

// Blocked gradients (runtime/grad_sink.h): rows [r0, r1) of dwte or dwpe, blocks in any
// order, give bitwise encoder_backward's rows (the same sums in position order).
TEST(Encoder, RowBlocksAreTheWholeBackwardBitwise) {
  std::mt19937_64 rng(43);
  const auto R = to_float(random_vector(B * T * C, rng));
  const auto wte0 = to_float(random_vector(Vp * C, rng)), wpe0 = to_float(random_vector(maxT * C, rng));
  auto dwte = wte0, dwpe = wpe0;
  cpu::encoder_backward(dwte.data(), dwpe.data(), R.data(), kTokens.data(), B, T, C, V);
  auto bwte = wte0, bwpe = wpe0;
  for (auto [r0, r1] : {std::pair{8, 16}, std::pair{0, 3}, std::pair{3, 8}}) {
    cpu::encoder_backward_rows<float>(bwte.data(), nullptr, R.data(), kTokens.data(), B, T, C, V, r0, r1);
  }
  for (auto [r0, r1] : {std::pair{4, 7}, std::pair{0, 4}}) {  // rows past T: nothing
    cpu::encoder_backward_rows<float>(nullptr, bwpe.data(), R.data(), kTokens.data(), B, T, C, V, r0, r1);
  }
  EXPECT_EQ(bwte, dwte);
  EXPECT_EQ(bwpe, dwpe);
}

TEST(Encoder, RejectsTokensOutsideTheVocabulary) {
  std::vector<double> out(B * T * C), wte(Vp * C), wpe(maxT * C);
  for (int32_t bad : {V, Vp, -1}) {
    auto tokens = kTokens;
    tokens[6] = bad;
    EXPECT_THROW(
        cpu::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V),
        InvalidArgument);
    EXPECT_THROW(
        cpu::encoder_backward(wte.data(), wpe.data(), out.data(), tokens.data(), B, T, C, V),
        InvalidArgument);
  }
}

// -log softmax(x)[target] by the definition, in long double.
double reference_loss(const double* x, int target) {
  long double mx = x[0];
  for (int v = 1; v < V; ++v) mx = std::max<long double>(mx, x[v]);
  long double sum = 0;
  for (int v = 0; v < V; ++v) sum += std::exp(static_cast<long double>(x[v]) - mx);
  return static_cast<double>(std::log(sum) + mx - x[target]);
}

constexpr int N = B * T;
// One ignored position (-1), the others in [0, V) with repeats.
const std::vector<int32_t> kTargets = {0, 10, 4, -1, 4, 9, 2, 2, 7, 1};

std::vector<double> padded_logits(std::mt19937_64& rng, double lo, double hi) {
  auto logits = random_vector(N * Vp, rng, lo, hi);
  for (int n = 0; n < N; ++n)
    for (int v = V; v < Vp; ++v) logits[n * Vp + v] = std::numeric_limits<double>::quiet_NaN();
  return logits;
}

TEST(SoftmaxXent, ForwardBackwardMatchesReferenceAndFiniteDifferences) {
  cpu::set_num_threads(2);
  std::mt19937_64 rng(42);
  auto logits = padded_logits(rng, -3, 3);
  const double dloss = 0.37;
  std::vector<double> losses(N), losses_only(N), dlogits(N * Vp, 5.0);
  cpu::softmax_xent_forward(losses_only.data(), logits.data(), kTargets.data(), N, V, Vp);
  cpu::softmax_xent_forward_backward(losses.data(), dlogits.data(), logits.data(), kTargets.data(),
                                     dloss, N, V, Vp);
  EXPECT_EQ(losses, losses_only);
  for (int n = 0; n < N; ++n) {
    const double ref = kTargets[n] < 0 ? 0.0 : reference_loss(&logits[n * Vp], kTargets[n]);
    EXPECT_NEAR(losses[n], ref, 1e-14 * std::max(1.0, ref)) << "row " << n;
    for (int v = V; v < Vp; ++v) EXPECT_EQ(dlogits[n * Vp + v], 0.0) << "padding of row " << n;
    if (kTargets[n] < 0) {
      for (int v = 0; v < V; ++v) EXPECT_EQ(dlogits[n * Vp + v], 0.0) << "ignored row";
    }
  }
  // L = dloss * sum(losses): its gradient is dlogits. The padding is NaN and must stay out
  // of the sums, so perturb only the real columns.
  auto loss = [&] {
    std::vector<double> l(N);
    cpu::softmax_xent_forward(l.data(), logits.data(), kTargets.data(), N, V, Vp);
    double s = 0;
    for (double x : l) s += dloss * x;
    return s;
  };
  std::vector<double> analytic, numeric;
  for (int n = 0; n < N; ++n) {
    for (int v = 0; v < V; ++v) {
      std::vector<double> one = {logits[n * Vp + v]};
      auto loss_of_one = [&] {
        const double saved = logits[n * Vp + v];
        logits[n * Vp + v] = one[0];
        const double l = loss();
        logits[n * Vp + v] = saved;
        return l;
      };
      numeric.push_back(numeric_grad(one, loss_of_one)[0]);
      analytic.push_back(dlogits[n * Vp + v]);
    }
  }
  ETR_EXPECT_GRAD("softmax_xent logits", analytic, numeric);

  // in place: dlogits written over the logits
  auto inplace = logits;
  std::vector<double> losses2(N);
  cpu::softmax_xent_forward_backward(losses2.data(), inplace.data(), inplace.data(),
                                     kTargets.data(), dloss, N, V, Vp);
  EXPECT_EQ(losses2, losses);
  EXPECT_EQ(inplace, dlogits);

  // float against double
  auto logitsf = to_float(logits);
  std::vector<float> lossesf(N), dlogitsf(N * Vp);
  cpu::softmax_xent_forward_backward(lossesf.data(), dlogitsf.data(), logitsf.data(),
                                     kTargets.data(), static_cast<float>(dloss), N, V, Vp);
  EXPECT_LT(rel_error(lossesf, losses), kFloatTol);
  EXPECT_LT(rel_error(dlogitsf, dlogits), kFloatTol);
}

TEST(SoftmaxXent, ExtremeLogitsAreStable) {
  // Rows of +-100 in random signs; a row where the target is the only -100 (loss ~200);
  // a row of all +100 (loss log V); a row where the target is the only +100 (loss ~0).
  std::mt19937_64 rng(43);
  std::vector<double> logits(N * Vp, std::numeric_limits<double>::quiet_NaN());
  std::bernoulli_distribution coin(0.5);
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < V; ++v) logits[n * Vp + v] = coin(rng) ? 100.0 : -100.0;
  auto set_row = [&](int n, double all, int special, double value) {
    for (int v = 0; v < V; ++v) logits[n * Vp + v] = all;
    logits[n * Vp + special] = value;
  };
  set_row(0, 100.0, kTargets[0], -100.0);
  set_row(1, 100.0, kTargets[1], 100.0);
  set_row(2, -100.0, kTargets[2], 100.0);
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<double> losses(N), dlogits(N * Vp);
    std::vector<float> lossesf(N), dlogitsf(N * Vp);
    auto logitsf = to_float(logits);
    cpu::softmax_xent_forward_backward(losses.data(), dlogits.data(), logits.data(),
                                       kTargets.data(), 1.0, N, V, Vp);
    cpu::softmax_xent_forward_backward(lossesf.data(), dlogitsf.data(), logitsf.data(),
                                       kTargets.data(), 1.0f, N, V, Vp);
    for (int n = 0; n < N; ++n) {
      const double ref = kTargets[n] < 0 ? 0.0 : reference_loss(&logits[n * Vp], kTargets[n]);
      ASSERT_TRUE(std::isfinite(losses[n]) && std::isfinite(lossesf[n])) << "row " << n;
      EXPECT_NEAR(losses[n], ref, 1e-13 * std::max(1.0, ref)) << "row " << n;
      EXPECT_NEAR(lossesf[n], ref, 1e-6 * std::max(1.0, ref)) << "row " << n;
      double row_sum = 0;
      for (int v = 0; v < V; ++v) {
        ASSERT_TRUE(std::isfinite(dlogitsf[n * Vp + v]));
        row_sum += dlogits[n * Vp + v];
      }
      EXPECT_NEAR(row_sum, 0.0, 1e-12) << "softmax - onehot sums to 0, row " << n;
    }
    EXPECT_NEAR(losses[0], 200.0 + std::log(V - 1.0), 1e-12);
    EXPECT_NEAR(losses[1], std::log(static_cast<double>(V)), 1e-12);
    EXPECT_NEAR(losses[2], 0.0, 1e-12);
    // second pass: the same rows shifted by +-1e4 (only differences matter)
    for (double& x : logits) x += (&x - logits.data()) / Vp % 2 ? 1e4 : -1e4;
  }
}

TEST(SoftmaxXent, RejectsTargetsOutsideTheVocabulary) {
  std::vector<double> logits(N * Vp), losses(N);
  auto targets = kTargets;
  targets[4] = V;
  EXPECT_THROW(cpu::softmax_xent_forward(losses.data(), logits.data(), targets.data(), N, V, Vp),
               InvalidArgument);
  EXPECT_THROW(cpu::softmax_xent_forward_backward(losses.data(), logits.data(), logits.data(),
                                                  targets.data(), 1.0, N, V, Vp),
               InvalidArgument);
  EXPECT_THROW(
      cpu::softmax_xent_forward(losses.data(), logits.data(), kTargets.data(), N, V, V - 1), Error);
}

}  // namespace
}  // namespace etr::testing
