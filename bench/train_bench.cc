#include "bench/train_bench.h"

#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_context.h"
#include "examples/train/trainer.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"
#include "runtime/kernels/cpu/threads.h"

namespace etr::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct TrainArgs {
  std::vector<int> threads = {1, 2};
  int steps = 20;
  int warmup = 3;
  std::string config;  // empty: the built-in benchmark config
  std::vector<std::string> overrides;
  std::string json;
};

// The stated benchmark model: the "small" preset (4 layers, 4 heads, d_model 256,
// seq 128, vocab 256, 3.26 M parameters), micro-batch 8, AdamW, synthetic data — the
// configuration MPI_NOTES.md measured PyTorch on.
TrainConfig bench_config(const TrainArgs& a) {
  TrainConfig c = bench_train_config(R"(model { preset: "small" }
                                        batch { global_batch: 8 micro_batch: 8 })",
                                     0, "etr-bench train", a.config, a.overrides);
  resolve(c);
  return c;
}

// OpenBLAS's own sgemm with its own `threads`: the MLP's first product of the model
// (M = B T, N = 4C, K = C), best of 5 after a warm-up. GFLOP/s.
double sgemm_gflops(int64_t M, int64_t N, int64_t K, int threads) {
  std::vector<float> a(M * K, 0.5f), b(K * N, 0.25f), c(M * N, 0.f);
  openblas_set_num_threads(threads);
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {
    const auto t0 = Clock::now();
    int iters = 0;
    do {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, a.data(), K, b.data(), K,
                  0.f, c.data(), N);
      ++iters;
    } while (std::chrono::duration<double>(Clock::now() - t0).count() < 0.05);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
    if (rep > 0) best = std::max(best, 2.0 * M * N * K / s / 1e9);
  }
  openblas_set_num_threads(1);
  return best;
}

void run(BenchContext& ctx, const TrainArgs& a) {
  if (ctx.size() > 1) {
    throw ConfigError("etr-bench train measures one rank; run it without mpirun or with -np 1");
  }
  const TrainConfig config = bench_config(a);
  const int64_t B = config.batch().global_batch(), T = config.model().seq_len();
  const int64_t C = config.model().d_model();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "# etr-bench train: GPT-2 n_layer=%d n_head=%d d_model=%d seq_len=%d vocab=%d, "
                "global batch %lld x %lld tokens (micro-batch %d), AdamW, synthetic data\n"
                "# %d warm-up steps, then %d timed steps; tokens/s = timed tokens / time\n"
                "# GFLOP/s = (6 N + 12 L C T) FLOPs per token x tokens/s (N parameters)\n"
                "# sgemm = OpenBLAS cblas_sgemm of the MLP's first product [%lld x %lld] x [%lld x "
                "%lld]^T at the same thread count, best of 5, in this run\n",
                config.model().n_layer(), config.model().n_head(), config.model().d_model(),
                config.model().seq_len(), config.model().vocab_size(),
                static_cast<long long>(B), static_cast<long long>(T), config.batch().micro_batch(),
                a.warmup, a.steps, static_cast<long long>(B * T), static_cast<long long>(C),
                static_cast<long long>(4 * C), static_cast<long long>(C));
  ctx.print(buf);
  ctx.print("# threads   tokens/s    ms/step   GFLOP/s   sgemm GFLOP/s   model/sgemm  final loss\n");
  nlohmann::json rows = nlohmann::json::array();
  for (int t : a.threads) {
    cpu::set_num_threads(t);
    Logger& log = ctx.world().log();
    const LogLevel level = log.level();
    log.set_level(LogLevel::kWarn);  // the trainer's start-up lines would break the table
    train::Trainer trainer(config, ctx.world());
    log.set_level(level);
    for (int i = 0; i < a.warmup; ++i) trainer.train_step();
    const auto t0 = Clock::now();
    double loss = 0;
    for (int i = 0; i < a.steps; ++i) loss = trainer.train_step().loss;
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const double tps = static_cast<double>(a.steps * B * T) / secs;
    gpt::GptConfig g = trainer.model().config();
    const double gflops = g.flops_per_token(T) * tps / 1e9;
    const double ref = sgemm_gflops(B * T, 4 * C, C, t);
    cpu::set_num_threads(t);
    std::snprintf(buf, sizeof buf, "  %7d  %9.0f  %9.1f  %8.2f  %14.2f  %11.1f%%  %10.4f\n", t, tps,
                  secs / a.steps * 1e3, gflops, ref, 100.0 * gflops / ref, loss);
    ctx.print(buf);
    rows.push_back({{"threads", t}, {"tokens_per_s", tps}, {"ms_per_step", secs / a.steps * 1e3},
                    {"gflops", gflops}, {"sgemm_gflops", ref}, {"final_loss", loss}});
  }
  if (!a.json.empty()) {
    ctx.write_json(a.json, {{"benchmark", "train"},
                            {"config", format_config(config)},
                            {"steps", a.steps},
                            {"warmup", a.warmup},
                            {"rows", rows}});
  }
}

}  // namespace

void add_train_subcommand(CLI::App& app, SubcommandList& list) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Training throughput of the example GPT-2 at 1 and 2 threads beside sgemm");
  cmd->add_option("--threads", args->threads, "Thread counts to measure")->capture_default_str();
  cmd->add_option("--steps", args->steps, "Timed optimizer steps")->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "Untimed steps first")->capture_default_str();
  add_training_config_options(cmd, args->config, args->overrides, args->json);
  list.push_back({cmd, [args](BenchContext& ctx) {
                    if (args->steps < 1 || args->warmup < 0) {
                      throw ConfigError("--steps must be at least 1 and --warmup at least 0");
                    }
                    for (int t : args->threads) {
                      if (t < 1) throw ConfigError("--threads takes counts of at least 1");
                    }
                    run(ctx, *args);
                  }});
}

}  // namespace etr::bench
