// Tests of runtime/kernels/cpu/threads.h and of the kernels' thread-count independence:
// every kernel, forward and backward, in float at sizes above its parallel thresholds,
// run on 1 and on 2 threads. The kernels that split only their outputs over the threads
// (parallel.h) must give bitwise identical results; the OpenBLAS-based ones (matmul,
// attention) are split by rows or columns of each product, which leaves each element's
// sum to one single-threaded call, and are held to 1e-6 (normwise relative; the test
// prints whether they were identical too). Also: OpenBLAS is put back to one thread when
// something else changed it, and kernels called from inside an OpenMP team still work.
#include <cblas.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "runtime/error.h"
#include "runtime/omp_env.h"
#include "runtime/kernels/kernels.h"
#include "unit/kernel_test_util.h"

namespace etr::testing {
namespace {

// Runs `run` (which writes its results into the vectors it returns) at 1 and 2 threads.
std::vector<std::vector<float>> at_threads(
    int threads, const std::function<std::vector<std::vector<float>>()>& run) {
  cpu::set_num_threads(threads);
  auto r = run();
  cpu::set_num_threads(2);
  return r;
}

void expect_same(const char* name, const std::function<std::vector<std::vector<float>>()>& run,
                 bool bitwise) {
  const auto one = at_threads(1, run);
  const auto two = at_threads(2, run);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    const bool identical = one[i] == two[i];
    std::printf("[ threads  ] %-22s output %zu: 1 vs 2 threads %s (relative %.2e)\n", name, i,
                identical ? "identical" : "differ", rel_error(one[i], two[i]));
    if (bitwise) {
      EXPECT_TRUE(identical) << name << " output " << i;
    } else {
      EXPECT_LT(rel_error(one[i], two[i]), 1e-6) << name << " output " << i;
    }
  }
}

std::vector<float> rand_f(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return to_float(random_vector(n, rng));
}

// A small GPT's shapes, above every kernel's parallel threshold.
constexpr int B = 4, T = 70, C = 192, NH = 3, V = 101, Vp = 128;
constexpr int N = B * T;

TEST(KernelThreads, SetAndGet) {
  cpu::set_num_threads(3);
  EXPECT_EQ(cpu::num_threads(), 3);
  EXPECT_EQ(openblas_get_num_threads(), 1);
  cpu::set_num_threads(2);
  EXPECT_EQ(cpu::num_threads(), 2);
  EXPECT_THROW(cpu::set_num_threads(0), InvalidArgument);
  EXPECT_EQ(cpu::num_threads(), 2);
}

TEST(KernelThreads, BlasIsPutBackToOneThread) {
  cpu::set_num_threads(2);
  openblas_set_num_threads(2);  // as a benchmark of OpenBLAS's own threading does
  auto a = rand_f(N * C, 1), w = rand_f(3 * C * C, 2);
  std::vector<float> out(N * 3 * C);
  cpu::matmul_forward<float>(out.data(), a.data(), w.data(), nullptr, N, C, 3 * C);
  EXPECT_EQ(openblas_get_num_threads(), 1);
}

// Kernels called from inside the caller's own OpenMP team (nested: each call gets a team
// of one) compute the whole result, and OpenBLAS tolerates the concurrent calls.
TEST(KernelThreads, CallsFromInsideAnOpenMPTeam) {
  cpu::set_num_threads(2);
  const auto inp = rand_f(N * C, 21), w = rand_f(3 * C * C, 22), g = rand_f(C, 23);
  std::vector<float> ref(N * 3 * C), ref_ln(N * C);
  cpu::matmul_forward<float>(ref.data(), inp.data(), w.data(), nullptr, N, C, 3 * C);
  cpu::layernorm_forward<float>(ref_ln.data(), nullptr, nullptr, inp.data(), g.data(), g.data(), N,
                                C);
  std::vector<std::vector<float>> outs(2, std::vector<float>(N * 3 * C)),
      lns(2, std::vector<float>(N * C));
#pragma omp parallel num_threads(2)
  {
    const int i = omp_get_thread_num();
    cpu::matmul_forward<float>(outs[i].data(), inp.data(), w.data(), nullptr, N, C, 3 * C);
    cpu::layernorm_forward<float>(lns[i].data(), nullptr, nullptr, inp.data(), g.data(), g.data(),
                                  N, C);
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_LT(rel_error(outs[i], ref), 1e-6) << "caller thread " << i;
    EXPECT_EQ(lns[i], ref_ln) << "caller thread " << i;
  }
}

TEST(KernelThreads, MatmulDoesNotDependOnThreads) {
  const auto inp = rand_f(N * C, 3), w = rand_f(4 * C * C, 4), b = rand_f(4 * C, 5),
             dout = rand_f(N * 4 * C, 6);
  // forward [N, 4C] splits rows; a few rows against many columns splits columns
  expect_same(
      "matmul",
      [&] {
        std::vector<float> out(N * 4 * C), out_cols(8 * 4 * C), dinp(N * C, 0.5f),
            dw(4 * C * C, 0.25f), db(4 * C, 0.125f);
        cpu::matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, 4 * C);
        cpu::matmul_forward(out_cols.data(), inp.data(), w.data(), b.data(), 8, C, 4 * C);
        cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                             N, C, 4 * C);
        return std::vector<std::vector<float>>{out, out_cols, dinp, dw, db};
      },
      /*bitwise=*/false);
}

TEST(KernelThreads, AttentionDoesNotDependOnThreads) {
  const auto qkv = rand_f(N * 3 * C, 7), dout = rand_f(N * C, 8);
  expect_same(
      "attention",
      [&] {
        std::vector<float> out(N * C), att(B * NH * T * T), dqkv(N * 3 * C, 0.5f);
        std::vector<float> scratch(cpu::attention_backward_scratch_size(T, cpu::num_threads()));
        cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
        cpu::attention_backward(dqkv.data(), scratch.data(), static_cast<int64_t>(scratch.size()),
                                dout.data(), qkv.data(), att.data(), B, T, C, NH);
        return std::vector<std::vector<float>>{out, att, dqkv};
      },
      /*bitwise=*/false);
}

TEST(KernelThreads, ElementwiseAndReductionKernelsAreBitwiseIdentical) {
  const auto x = rand_f(N * C, 9), x2 = rand_f(N * C, 10), w = rand_f(C, 11), b = rand_f(C, 12),
             dout = rand_f(N * C, 13), h = rand_f(N * 4 * C, 14), dh = rand_f(N * 4 * C, 15),
             wte = rand_f(Vp * C, 16), wpe = rand_f(T * C, 17), logits = rand_f(N * Vp, 18);
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; ++i) {
    tokens[i] = (i * 37) % V;
    targets[i] = i % 13 == 0 ? -1 : (i * 53) % V;
  }
  expect_same(
      "layernorm",
      [&] {
        std::vector<float> out(N * C), mean(N), rstd(N), dinp(N * C, 0.5f), dw(C, 0.25f), db(C);
        cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                               N, C);
        cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                                mean.data(), rstd.data(), N, C);
        return std::vector<std::vector<float>>{out, mean, rstd, dinp, dw, db};
      },
      /*bitwise=*/true);
  expect_same(
      "gelu",
      [&] {
        std::vector<float> out(N * 4 * C), dinp(N * 4 * C, 0.5f);
        cpu::gelu_forward(out.data(), h.data(), N * 4 * C);
        cpu::gelu_backward(dinp.data(), h.data(), dh.data(), N * 4 * C);
        return std::vector<std::vector<float>>{out, dinp};
      },
      /*bitwise=*/true);
  expect_same(
      "residual",
      [&] {
        std::vector<float> out(N * C), d1(N * C, 0.5f), d2(N * C);
        cpu::residual_forward(out.data(), x.data(), x2.data(), N * C);
        cpu::residual_backward(d1.data(), d2.data(), dout.data(), N * C);
        return std::vector<std::vector<float>>{out, d1, d2};
      },
      /*bitwise=*/true);
  expect_same(
      "encoder",
      [&] {
        std::vector<float> out(N * C), dwte(Vp * C, 0.5f), dwpe(T * C);
        cpu::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V);
        cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, V);
        return std::vector<std::vector<float>>{out, dwte, dwpe};
      },
      /*bitwise=*/true);
  expect_same(
      "softmax_xent",
      [&] {
        std::vector<float> losses(N), losses2(N), dlogits(N * Vp);
        cpu::softmax_xent_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
        cpu::softmax_xent_forward_backward(losses2.data(), dlogits.data(), logits.data(),
                                           targets.data(), 1.0f / N, N, V, Vp);
        return std::vector<std::vector<float>>{losses, losses2, dlogits};
      },
      /*bitwise=*/true);
}

}  // namespace
}  // namespace etr::testing

// runtime/omp_env.h: OpenBLAS's generic fallback is replaced only when the CPU has the
// wider units, and a kernel set OpenBLAS chose for a CPU it knew is kept.
TEST(OpenblasCoretype, ReplacesOnlyTheGenericFallback) {
  EXPECT_STREQ(etr::openblas_coretype_for("Prescott", true, true), "SkylakeX");
  EXPECT_STREQ(etr::openblas_coretype_for("Prescott", false, true), "Haswell");
  EXPECT_EQ(etr::openblas_coretype_for("Prescott", false, false), nullptr);
  EXPECT_EQ(etr::openblas_coretype_for("Haswell", true, true), nullptr);
  EXPECT_EQ(etr::openblas_coretype_for("SkylakeX", true, true), nullptr);
  EXPECT_EQ(etr::openblas_coretype_for("", true, true), nullptr);
}
