#include "bench/train_bench.h"

#ifdef ETR_HAVE_CUDA
#include "bench/gpu_bench.h"
#endif

#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_context.h"
#include "bench/premise.h"
#include "bench/table.h"
#include "examples/train/trainer.h"
#include "runtime/config/train_config.h"
#include "runtime/cpu_affinity.h"
#include "runtime/error.h"
#include "runtime/kernels/cpu/threads.h"
#include "examples/gpt/model_presets.h"

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
  std::string device = "cpu";            // cuda: gpu-train's benchmark instead
  std::vector<std::string> references;   // --device cuda: PyTorch's runs
  std::string precision = "bf16";        // --device cuda: fp32 or bf16
};

// The stated benchmark model: the "small" preset (4 layers, 4 heads, d_model 256,
// seq 128, vocab 256, 3.26 M parameters), micro-batch 8, AdamW, synthetic data — the
// configuration docs/machine_notes.md measured PyTorch on.
TrainConfig bench_config(const TrainArgs& a) {
  TrainConfig c = bench_train_config(R"(model { preset: "small" }
                                        batch { global_batch: 8 micro_batch: 8 })",
                                     0, "etr-bench train", a.config, a.overrides);
  resolve(c, gpt::model_presets());
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

// One row: the trainer and the sgemm reference at `threads`, pinned to `cpus`.
struct TrainRow {
  int threads = 0;
  double tokens_per_s = 0, ms_per_step = 0, gflops = 0, sgemm_gflops = 0, loss = 0;
  CpuUse model_use, sgemm_use;  // the timed steps; the timed sgemm calls
  std::string refused;          // why the premise failed; "" when it held
};

TrainRow measure(BenchContext& ctx, const TrainArgs& a, TrainConfig config, int threads,
                 const CpuList& cpus) {
  TrainRow row;
  row.threads = threads;
  // The trainer sets the kernels' thread count from the config (0 would be every core).
  config.mutable_runtime()->set_threads(threads);
  ScopedProcessAffinity pin(cpus);
  Logger& log = ctx.world().log();
  const LogLevel level = log.level();
  log.set_level(LogLevel::kWarn);  // the trainer's start-up lines would break the table
  train::Trainer trainer(config, ctx.world());
  log.set_level(level);
  for (int i = 0; i < a.warmup; ++i) trainer.train_step();
  CpuMeter meter;
  for (int i = 0; i < a.steps; ++i) row.loss = trainer.train_step().loss;
  row.model_use = meter.stop();
  const int kernel_threads = cpu::num_threads();  // what the trainer set from the config
  const int64_t B = config.batch().global_batch(), T = config.model().seq_len();
  const int64_t C = config.model().d_model();
  const double secs = row.model_use.wall_seconds;
  row.tokens_per_s = static_cast<double>(a.steps * B * T) / secs;
  row.ms_per_step = secs / a.steps * 1e3;
  row.gflops = trainer.model().config().flops_per_token(T) * row.tokens_per_s / 1e9;
  meter.restart();
  row.sgemm_gflops = sgemm_gflops(B * T, 4 * C, C, threads);
  row.sgemm_use = meter.stop();
  const Premise premise{.threads = threads, .pinned = true, .max_others = 0.10};
  row.refused = premise_failure(premise, row.model_use);
  if (row.refused.empty() && kernel_threads != threads) {
    row.refused = "the kernels ran " + std::to_string(kernel_threads) + " threads";
  }
  if (row.refused.empty()) {
    const std::string sgemm = premise_failure(premise, row.sgemm_use);
    if (!sgemm.empty()) row.refused = "sgemm: " + sgemm;
  }
  return row;
}

std::string row_text(const TrainRow& r) {
  const double waiting = r.model_use.waiting(r.threads);
  std::string s =
      cell("  %7d  %5s  %5.2f  %5s  ", r.threads, format_cpus(r.model_use.cpus).c_str(),
           r.model_use.cores_busy(), waiting < 0 ? "?" : cell("%.0f%%", waiting * 100).c_str());
  if (!r.refused.empty()) return s + refused_cell(r.refused) + "\n";
  return s + cell("%9.0f  %9.1f  %8.2f  %14.2f  %11.1f%%  %10.4f\n", r.tokens_per_s, r.ms_per_step,
                  r.gflops, r.sgemm_gflops, 100.0 * r.gflops / r.sgemm_gflops, r.loss);
}

nlohmann::json row_json(const TrainRow& r) {
  nlohmann::json j = {
      {"threads", r.threads},
      {"cpus", format_cpus(r.model_use.cpus)},
      {"cores_busy", r.model_use.cores_busy()},
      {"waiting", r.model_use.waiting(r.threads)},
      {"sgemm_cores_busy", r.sgemm_use.cores_busy()},
      {"premise_failed", r.refused.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.refused)}};
  if (r.refused.empty()) {
    j.update({{"tokens_per_s", r.tokens_per_s},
              {"ms_per_step", r.ms_per_step},
              {"gflops", r.gflops},
              {"sgemm_gflops", r.sgemm_gflops},
              {"final_loss", r.loss}});
  }
  return j;
}

// Each row runs on the first `threads` CPUs this process may use: refused here, before
// anything runs, when there are fewer.
void check_cpus(const TrainArgs& a, const CpuList& allowed) {
  for (int t : a.threads) {
    if (t > static_cast<int>(allowed.size())) {
      throw ConfigError("--threads " + std::to_string(t) + " needs " + std::to_string(t) +
                        " CPUs of its own, but this process may run on " +
                        std::to_string(allowed.size()) + " (" + format_cpus(allowed) +
                        "); ask for at most that many threads");
    }
  }
}

void run(BenchContext& ctx, const TrainArgs& a) {
  if (ctx.size() > 1) {
    throw ConfigError("etr-bench train measures one rank; run it without mpirun or with -np 1");
  }
  const CpuList allowed = this_thread_cpus();
  check_cpus(a, allowed);
  const TrainConfig config = bench_config(a);
  const int64_t B = config.batch().global_batch(), T = config.model().seq_len();
  const int64_t C = config.model().d_model();
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "# etr-bench train: GPT-2 n_layer=%d n_head=%d d_model=%d seq_len=%d vocab=%d, "
                "global batch %lld x %lld tokens (micro-batch %d), AdamW, synthetic data\n"
                "# %d warm-up steps, then %d timed steps; tokens/s = timed tokens / time\n"
                "# GFLOP/s = (6 N + 12 L C T) FLOPs per token x tokens/s (N parameters)\n"
                "# sgemm = OpenBLAS cblas_sgemm of the MLP's first product [%lld x %lld] x [%lld x "
                "%lld]^T at the same thread count, best of 5, in this run\n"
                "# each row is pinned to its first `threads` CPUs of %s; cpus = where its threads "
                "could run, busy = CPU time / wall time of the timed steps (cores kept busy), "
                "wait = the share of the threads' time spent waiting for a CPU (other work on "
                "the cores);\n"
                "# a row whose busy exceeds threads x 1.15, whose wait exceeds 10%%, whose CPUs "
                "other processes kept more than 0.1 cores per thread busy (/proc/stat), or whose "
                "threads could run elsewhere shows \"premise failed\" instead of its figures\n",
                config.model().n_layer(), config.model().n_head(), config.model().d_model(),
                config.model().seq_len(), config.model().vocab_size(), static_cast<long long>(B),
                static_cast<long long>(T), config.batch().micro_batch(), a.warmup, a.steps,
                static_cast<long long>(B * T), static_cast<long long>(C),
                static_cast<long long>(4 * C), static_cast<long long>(C),
                format_cpus(allowed).c_str());
  ctx.print(buf);
  ctx.print(
      "# threads   cpus   busy   wait   tokens/s    ms/step   GFLOP/s   sgemm GFLOP/s   "
      "model/sgemm  final loss\n");
  nlohmann::json rows = nlohmann::json::array();
  int refused = 0;
  for (int t : a.threads) {
    const CpuList cpus(allowed.begin(), allowed.begin() + t);
    const TrainRow row = measure(ctx, a, config, t, cpus);
    ctx.print(row_text(row));
    rows.push_back(row_json(row));
    refused += !row.refused.empty();
  }
  if (!a.json.empty()) {
    ctx.write_json(a.json, {{"benchmark", "train"},
                            {"config", format_config(config)},
                            {"steps", a.steps},
                            {"warmup", a.warmup},
                            {"rows", rows}});
  }
  if (refused) throw_refused(refused);
}

}  // namespace

void add_train_subcommand(CLI::App& app, SubcommandList& list) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Training throughput of the example GPT-2 at 1 and 2 threads beside sgemm");
  cmd->add_option("--threads", args->threads,
                  "Thread counts to measure; each row runs pinned to that many CPUs")
      ->capture_default_str();
  cmd->add_option("--steps", args->steps, "Timed optimizer steps")->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "Untimed steps first")->capture_default_str();
  add_training_config_options(cmd, args->config, args->overrides, args->json);
  cmd->add_option("--device", args->device,
                  "cpu (this table), or cuda: GPT-2 124M on one GPU through etr-train's loop and "
                  "etr's layers beside PyTorch's runs (--reference), as etr-bench gpu-train")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--reference", args->references,
                  "With --device cuda: PyTorch's runs of the same model (bench/pytorch_gpu_train.py "
                  "--json); repeatable");
  CLI::Option* precision =
      cmd->add_option("--precision", args->precision,
                      "With --device cuda: fp32 (TF32 products) or bf16 (mixed precision, the "
                      "GPU's default): etr-train's runtime.precision and the MFU's peak")
          ->check(CLI::IsMember({"fp32", "bf16"}))
          ->capture_default_str();
  list.push_back({cmd, [args, precision](BenchContext& ctx) {
                    if (args->steps < 1 || args->warmup < 0) {
                      throw ConfigError("--steps must be at least 1 and --warmup at least 0");
                    }
                    if (args->device == "cuda") {
                      if (!args->config.empty() || !args->overrides.empty()) {
                        throw ConfigError("etr-bench train --device cuda runs GPT-2 124M at 8 x 1024 "
                                          "tokens (etr-bench gpu-train's model) and takes no "
                                          "--config or --set");
                      }
#ifdef ETR_HAVE_CUDA
                      run_gpu_train_for(ctx, args->steps, args->warmup, args->precision,
                                        args->references, args->json);
                      return;
#else
                      throw ConfigError("etr-bench train --device cuda: this etr-bench was built "
                                        "without CUDA");
#endif
                    }
                    if (precision->count() > 0) {
                      throw ConfigError(
                          "--precision is for --device cuda (on the CPU: --set "
                          "runtime.precision=...)");
                    }
                    for (int t : args->threads) {
                      if (t < 1) throw ConfigError("--threads takes counts of at least 1");
                    }
                    run(ctx, *args);
                  }});
}

}  // namespace etr::bench
