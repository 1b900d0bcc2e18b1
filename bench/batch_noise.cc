// `etr-bench batch`, table 4 (bench/batch_bench.cc): the gradient noise scale's estimator
// (parallel/goodput.h) on a synthetic problem whose noise scale is known, and the cost of
// one goodput decision. Rank 0 alone.
#include "bench/batch_noise.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_context.h"
#include "bench/table.h"
#include "parallel/goodput.h"

namespace etr::bench {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

// 4. Noise scale (rank 0 alone).

// The estimate after `steps` steps of a problem whose per-sample gradients are
// mu + N(0, sigma^2 I_d), |mu|^2 = 1 and d sigma^2 = `known`, so that tr(Sigma) / |G|^2 is
// `known` exactly (a mean of n samples is drawn directly as mu + N(0, sigma^2 / n I_d), the
// same distribution). `shares`: the ranks' samples (data_parallel_sample), or with `micro`
// one rank whose first micro-batch is shares[0] of the step's samples (micro_batch_sample).
double estimate_noise_scale(double known, int dim, uint64_t seed,
                            const std::vector<uint64_t>& shares, int steps, bool micro) {
  std::mt19937_64 rng(seed);
  const double mu = 1 / std::sqrt(static_cast<double>(dim));
  const auto sq_norm = [](const std::vector<double>& g) {
    double s = 0;
    for (double x : g) s += x * x;
    return s;
  };
  GradientNoiseScale gns(0.95);
  uint64_t B = 0;
  for (uint64_t n : shares) B += n;
  std::vector<double> g(static_cast<size_t>(dim)), global(g.size());
  for (int step = 0; step < steps; ++step) {
    std::fill(global.begin(), global.end(), 0.0);
    std::vector<RankGradient> ranks;
    for (uint64_t n : shares) {
      std::normal_distribution<double> z(0, std::sqrt(known / dim / static_cast<double>(n)));
      for (size_t i = 0; i < g.size(); ++i) {
        g[i] = mu + z(rng);
        global[i] += static_cast<double>(n) / static_cast<double>(B) * g[i];
      }
      ranks.push_back({n, sq_norm(g)});
    }
    gns.update(micro ? micro_batch_sample(ranks[0].sq_norm, ranks[0].samples, sq_norm(global), B)
                     : data_parallel_sample(ranks, sq_norm(global)));
  }
  return gns.noise_scale().value_or(std::nan(""));
}

// Microseconds per GoodputPolicy::decide(), over `calls` calls.
double decide_microseconds(const GoodputPolicy& policy, int calls) {
  const StepTimeFit fit{0.02, 0.004, 3};
  uint64_t sink = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < calls; ++i) {
    sink += policy.decide(uint64_t{16} << (i % 4), 16.0 * (1 + i % 64), fit).batch;
  }
  const double us = 1e6 * seconds_since(t0) / calls;
  volatile uint64_t keep = sink;  // the calls' results are used
  static_cast<void>(keep);
  return us;
}

}  // namespace

json noise_table(BenchContext& ctx, int noise_steps) {
  if (!ctx.is_root()) return json::object();
  struct Sim {
    const char* name;
    std::vector<uint64_t> shares;  // of the global batch 64
    bool micro;                    // one rank: shares[0] is its first micro-batch
  };
  const Sim sims[] = {{"2 ranks 24|40", {24, 40}, false},
                      {"4 ranks 8|12|20|24", {8, 12, 20, 24}, false},
                      {"1 rank, 8 of 64", {8, 56}, true}};
  constexpr int kDim = 4096;
  ctx.print(cell(
      "\n# 4. gradient noise scale: per-sample gradients mu + N(0, sigma^2 I), d = %d, |mu|^2 = 1, "
      "d sigma^2 = B_noise (the known value); global batch 64 split unequally over simulated ranks "
      "(data_parallel_sample), or one rank's first micro-batch against its step "
      "(micro_batch_sample); %d steps, smoothing 0.95, std::mt19937_64 seeds 42...; error = "
      "estimate / known - 1\n#   known",
      kDim, noise_steps));
  for (const Sim& sim : sims) ctx.print(cell("  %20s  error", sim.name));
  ctx.print("\n");
  json rows = json::array();
  uint64_t seed = 42;
  for (double known : {16.0, 64.0, 256.0, 1024.0}) {
    std::vector<double> est;
    ctx.print(cell("  %6.0f", known));
    for (const Sim& sim : sims) {
      est.push_back(
          estimate_noise_scale(known, kDim, seed++, sim.shares, noise_steps, sim.micro));
      ctx.print(cell("  %20.1f %+5.1f%%", est.back(), 100 * (est.back() / known - 1)));
    }
    ctx.print("\n");
    rows.push_back({{"known", known}, {"estimates", est}});
  }
  const GoodputPolicy policy(GoodputSettings{8, 4096, 4, 0.05});
  constexpr int kCalls = 10000;
  const double us = decide_microseconds(policy, kCalls);
  ctx.print(
      cell("# goodput decision: %.2f us per GoodputPolicy::decide() (%zu candidates in [8, 4096], "
          "mean of %d calls; bar: < 10 ms = 10000 us)\n",
          us, policy.candidates().size(), kCalls));
  return {{"simulations", {sims[0].name, sims[1].name, sims[2].name}},
          {"rows", rows},
          {"decide_us", us},
          {"candidates", policy.candidates().size()}};
}

}  // namespace etr::bench
