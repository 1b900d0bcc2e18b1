// `etr-bench zero-grads`: the gradient bytes a rank holds at ZeRO 2-3 while a step
// accumulates micro-batches, beside the ZeRO paper's 4 Psi / N (issue 33: "ZeRO-2 with
// accumulation: gradient bytes per rank within 5 % of the paper's share"). Each stage runs
// twice: with room (the whole gradient window kept until the last micro-batch: one
// reduction a step, stage 0's sums) and under a budget between the two plans, where the
// memory model has every micro-batch reduce-scattered into the shard, in blocks
// (zero_engine.h, "Blocked gradients"). Gradient bytes = the shard (4 Psi / N with the
// layout's padding) + the gradient window's peak (the allocator's count of the pages of
// unreduced gradients; the largest over the ranks).
#include "bench/zero_grads_bench.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_context.h"
#include "bench/table.h"
#include "examples/gpt/model_presets.h"
#include "examples/train/trainer.h"
#include "parallel/zero_engine.h"
#include "runtime/bytes.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"

namespace etr::bench {
namespace {

struct GradArgs {
  int steps = 3;
  std::string config;
  std::vector<std::string> overrides;
  std::string json;
};

// The tiny GPT with 4 blocks (Psi = 220,544), 4 micro-batches of 1 sequence per rank and
// step, buckets (the blocks) of 1 KiB.
TrainConfig grads_config(const GradArgs& a, int ranks) {
  const std::string batch =
      "batch { global_batch: " + std::to_string(4 * ranks) + " micro_batch: 1 }";
  std::vector<std::string> overrides = a.overrides;  // a corpus that fits the tight budget
  if (a.config.empty()) overrides.insert(overrides.begin(), "data.synthetic_size=64KiB");
  TrainConfig c = bench_train_config(R"(model { preset: "tiny" n_layer: 4 }
                                        parallel { first_bucket_size: "1KiB" bucket_size: "1KiB" }
                                        )" +
                                         batch,
                                     1, "etr-bench zero-grads", a.config, overrides);
  resolve(c, gpt::model_presets());
  return c;
}

struct Row {
  int stage = 0;
  bool each = false;  // each micro-batch reduce-scattered (blocked when the layers allow)
  bool blocked = false;
  EngineMemory memory;
  size_t window_peak = 0;  // the largest over the ranks
  size_t predicted = 0;    // the memory model's window
  double seconds = 0;      // per step, the slowest rank
  double loss = 0;
};

// A budget between the plan that keeps the whole window and the one that reduces each
// micro-batch (the smallest over the ranks), as batch_memory_test makes one.
size_t budget_between_modes(BenchContext& ctx, const TrainConfig& c) {
  train::Trainer probe(c, ctx.world().group(), ctx.world().log());
  auto& z = dynamic_cast<ZeroEngine&>(probe.session().engine());
  const int k = static_cast<int>(probe.rank_batch().accumulation);
  if (k < 2)
    throw ConfigError(
        "etr-bench zero-grads needs several micro-batches a step (batch.micro_batch)");
  const size_t whole = z.predicted_windows_if(k, false).grads,
               each = z.predicted_windows_if(k, true).grads;
  size_t budget = probe.session().memory_model().peak(probe.session().micro_batch(), false) -
                  (whole - each) / 2;
  size_t lowest = budget;
  MPI_Allreduce(&budget, &lowest, 1, MPI_UNSIGNED_LONG, MPI_MIN, ctx.world().group().comm());
  return lowest;
}

void measure(BenchContext& ctx, const TrainConfig& base, const GradArgs& a, Row& row) {
  TrainConfig c = base;
  c.mutable_parallel()->set_zero_stage(row.stage);
  if (row.each)
    c.mutable_runtime()->set_memory_budget(std::to_string(budget_between_modes(ctx, c)));
  train::Trainer t(c, ctx.world().group(), ctx.world().log());
  auto& z = dynamic_cast<ZeroEngine&>(t.session().engine());
  if (z.reduces_each_micro_batch() != row.each) {
    throw Error("the memory model did not choose the mode this row measures (stage " +
                std::to_string(row.stage) + ")");
  }
  row.blocked = z.blocks_gradients();
  row.predicted = z.predicted_windows(static_cast<int>(t.rank_batch().accumulation)).grads;
  t.train_step();  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.steps; ++i) row.loss = t.train_step().loss;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  row.seconds = ctx.max_over_ranks(secs / a.steps);
  row.memory = z.memory();
  row.window_peak =
      static_cast<size_t>(ctx.max_over_ranks(static_cast<double>(row.memory.unreduced_peak)));
}

std::string mode_name(const Row& r) {
  if (!r.each) return "kept whole";
  return r.blocked ? "each, blocked" : "each, per layer";
}

void run(BenchContext& ctx, const GradArgs& a) {
  const TrainConfig config = grads_config(a, ctx.size());
  char buf[1024];
  std::snprintf(
      buf, sizeof buf,
      "# etr-bench zero-grads: GPT-2 n_layer=%d d_model=%d seq_len=%d vocab=%d, global batch "
      "%lld, micro-batch %d, buckets %s first, %s, %d ranks\n"
      "# grads = this rank's gradient shard + the most bytes of unreduced gradient pages at "
      "once (the largest over the ranks); paper = 4 Psi / N; planned = the memory model's "
      "window\n",
      config.model().n_layer(), config.model().d_model(), config.model().seq_len(),
      config.model().vocab_size(), static_cast<long long>(config.batch().global_batch()),
      config.batch().micro_batch(), config.parallel().first_bucket_size().c_str(),
      config.parallel().bucket_size().c_str(), ctx.size());
  ctx.print(buf);
  Logger& log = ctx.world().log();
  const LogLevel level = log.level();
  log.set_level(LogLevel::kWarn);
  std::vector<Row> rows;
  for (int s : {2, 3}) {
    for (bool each : {false, true}) {
      Row r;
      r.stage = s;
      r.each = each;
      rows.push_back(r);
    }
  }
  for (Row& r : rows) measure(ctx, config, a, r);
  log.set_level(level);
  ctx.print(
      "# stage  mode                 shard      window     planned       grads       paper     "
      "diff   s/step      loss\n");
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    const double shard = static_cast<double>(r.memory.grads);
    const double grads = shard + static_cast<double>(r.window_peak);
    const double paper = 4.0 * static_cast<double>(r.memory.psi) / r.memory.ranks;
    ctx.print(cell("  %5d  %-15s  %10s  %10s  %10s  %10s  %10s  %6.1f%%  %7.3f  %8.4f\n", r.stage,
                   mode_name(r).c_str(), format_bytes(shard).c_str(),
                   format_bytes(static_cast<double>(r.window_peak)).c_str(),
                   format_bytes(static_cast<double>(r.predicted)).c_str(),
                   format_bytes(grads).c_str(), format_bytes(paper).c_str(),
                   (grads / paper - 1) * 100, r.seconds, r.loss));
    out.push_back({{"stage", r.stage},
                   {"mode", mode_name(r)},
                   {"ranks", r.memory.ranks},
                   {"psi", r.memory.psi},
                   {"shard_bytes", r.memory.grads},
                   {"window_peak_bytes", r.window_peak},
                   {"planned_window_bytes", r.predicted},
                   {"grad_bytes", grads},
                   {"paper_bytes", paper},
                   {"seconds_per_step", r.seconds},
                   {"final_loss", r.loss}});
  }
  if (!a.json.empty()) {
    ctx.write_json(a.json, {{"benchmark", "zero-grads"},
                            {"config", format_config(config)},
                            {"machine", ctx.machine().to_json()},
                            {"steps", a.steps},
                            {"rows", out}});
  }
}

}  // namespace

void add_zero_grads_subcommand(CLI::App& app, SubcommandList& list) {
  auto args = std::make_shared<GradArgs>();
  CLI::App* cmd = app.add_subcommand("zero-grads",
                                     "ZeRO 2-3 with accumulation: gradient bytes per rank, kept "
                                     "whole and reduced each micro-batch, beside 4 Psi / N");
  cmd->add_option("--steps", args->steps, "Measured optimizer steps per row (after one warm-up)")
      ->capture_default_str();
  add_training_config_options(cmd, args->config, args->overrides, args->json);
  list.push_back({cmd, [args](BenchContext& ctx) {
                    if (args->steps < 1) throw ConfigError("--steps must be at least 1");
                    run(ctx, *args);
                  }});
}

}  // namespace etr::bench
