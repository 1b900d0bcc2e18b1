#include "bench/dp_bench.h"

#include <mpi.h>

#include <algorithm>
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

namespace etr::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct DpArgs {
  int steps = 10;
  int warmup = 2;
  int rounds = 3;
  std::string config;  // empty: the built-in benchmark config
  std::vector<std::string> overrides;
  std::string json;
};

// The stated benchmark model: the "small" preset (4 layers, d_model 256, seq 128,
// 3.26 M parameters = 13 MB of f32 gradients per step), global batch 8 x 128 tokens,
// micro-batch 4 (np 1 accumulates 2, np 2 runs 1 per rank), one thread per rank, the
// default buckets (256 KiB first, 1 MiB cap).
TrainConfig bench_config(const DpArgs& a) {
  TrainConfig c = bench_train_config(R"(model { preset: "small" }
                                        batch { global_batch: 8 micro_batch: 4 })",
                                     1, "etr-bench dp", a.config, a.overrides);
  resolve(c);
  return c;
}

struct Row {
  const char* mode = "";
  int ranks = 1;
  bool overlap = true;
  double tokens_per_s = 0;  // best round
  double ms_per_step = 0;
  double comm_ms = 0;  // per step, in the best round
  double exposed_ms = 0;
  double hidden = 1;
  double loss = 0;
  std::vector<double> round_tps;  // every round, for the median
};

// One round of `row` on `group`: tokens/s and the communication figures.
void measure(const TrainConfig& base, const Group& group, Logger& log, const DpArgs& a,
             Row& row) {
  TrainConfig c = base;
  c.mutable_parallel()->set_overlap(row.overlap);
  train::Trainer trainer(c, group, log);
  for (int i = 0; i < a.warmup; ++i) trainer.train_step();
  ReduceStats comm;
  double loss = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < a.steps; ++i) {
    const train::StepStats s = trainer.train_step();
    comm += s.comm;
    loss = s.loss;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double tokens = static_cast<double>(a.steps) * c.batch().global_batch() * c.model().seq_len();
  const double tps = tokens / secs;
  row.round_tps.push_back(tps);
  if (tps > row.tokens_per_s) {
    row.tokens_per_s = tps;
    row.ms_per_step = secs / a.steps * 1e3;
    row.comm_ms = comm.comm_seconds / a.steps * 1e3;
    row.exposed_ms = comm.exposed_seconds / a.steps * 1e3;
    row.hidden = comm.hidden_fraction();
    row.loss = loss;
  }
}

void run(BenchContext& ctx, const DpArgs& a) {
  if (ctx.size() != 2) {
    throw ConfigError("etr-bench dp compares one rank with two; run it with mpirun -np 2 "
                      "(bench/run_dp.sh)");
  }
  const TrainConfig config = bench_config(a);
  const int64_t B = config.batch().global_batch(), T = config.model().seq_len();
  char buf[768];
  std::snprintf(
      buf, sizeof buf,
      "# etr-bench dp: GPT-2 n_layer=%d d_model=%d seq_len=%d, global batch %lld x %lld tokens, "
      "micro-batch %d, %d thread(s) per rank\n"
      "# %s\n"
      "# buckets: first %s, then %s; %d round(s) alternating the modes, best round shown "
      "(and the median tok/s); "
      "%d warm-up + %d timed steps each\n"
      "# comm = gradient communication per step (progress engine busy), exposed = optimizer "
      "waiting for it, hidden = 1 - exposed/comm, efficiency = tok/s / (ranks x tok/s of "
      "single)\n",
      config.model().n_layer(), config.model().d_model(), config.model().seq_len(),
      static_cast<long long>(B), static_cast<long long>(T), config.batch().micro_batch(),
      config.runtime().threads(), ctx.machine().placement().c_str(),
      config.parallel().first_bucket_size().c_str(), config.parallel().bucket_size().c_str(),
      a.rounds, a.warmup, a.steps);
  ctx.print(buf);
  Logger& log = ctx.world().log();
  const LogLevel level = log.level();
  log.set_level(LogLevel::kWarn);  // the trainer's start-up lines would break the table
  std::vector<Row> rows(3);
  rows[0].mode = "single", rows[0].ranks = 1, rows[0].overlap = true;
  rows[1].mode = "dp overlap on", rows[1].ranks = 2, rows[1].overlap = true;
  rows[2].mode = "dp overlap off", rows[2].ranks = 2, rows[2].overlap = false;
  Group self(MPI_COMM_SELF, "self", /*owned=*/false);
  for (int round = 0; round < a.rounds; ++round) {
    for (Row& row : rows) {
      if (row.ranks == 1) {
        if (ctx.is_root()) measure(config, self, log, a, row);
        ctx.sleeping_barrier();  // rank 1 leaves the cores to rank 0
      } else {
        measure(config, ctx.world().group(), log, a, row);
      }
    }
  }
  log.set_level(level);
  ctx.print("# mode             ranks   tokens/s   ms/step   comm ms  exposed ms  hidden  "
            "efficiency  median tok/s  final loss\n");
  nlohmann::json out = nlohmann::json::array();
  const double single = rows[0].tokens_per_s;
  for (const Row& r : rows) {
    const double eff = r.tokens_per_s / (r.ranks * single);
    if (r.ranks == 1) {
      std::snprintf(buf, sizeof buf,
                    "  %-15s  %5d  %9.0f  %8.1f  %8s  %10s  %6s  %9.0f%%  %12.0f  %10.4f\n",
                    r.mode, r.ranks, r.tokens_per_s, r.ms_per_step, "-", "-", "-", 100.0,
                    median(r.round_tps), r.loss);
    } else {
      std::snprintf(buf, sizeof buf,
                    "  %-15s  %5d  %9.0f  %8.1f  %8.2f  %10.2f  %5.0f%%  %9.0f%%  %12.0f  %10.4f\n",
                    r.mode, r.ranks, r.tokens_per_s, r.ms_per_step, r.comm_ms, r.exposed_ms,
                    r.hidden * 100, eff * 100, median(r.round_tps), r.loss);
    }
    ctx.print(buf);
    out.push_back({{"mode", r.mode}, {"ranks", r.ranks}, {"overlap", r.overlap},
                   {"tokens_per_s", r.tokens_per_s}, {"ms_per_step", r.ms_per_step},
                   {"comm_ms", r.comm_ms}, {"exposed_ms", r.exposed_ms},
                   {"hidden_fraction", r.hidden}, {"efficiency", eff}, {"final_loss", r.loss},
                   {"round_tokens_per_s", r.round_tps}});
  }
  const double speedup = rows[1].tokens_per_s / rows[2].tokens_per_s;
  std::snprintf(buf, sizeof buf, "# overlap on / off: %.3fx tokens/s (best rounds), %.3fx (medians)\n",
                speedup, median(rows[1].round_tps) / median(rows[2].round_tps));
  ctx.print(buf);
  if (!a.json.empty()) {
    ctx.write_json(a.json, {{"benchmark", "dp"},
                            {"config", format_config(config)},
                            {"machine", ctx.machine().to_json()},
                            {"steps", a.steps},
                            {"warmup", a.warmup},
                            {"rounds", a.rounds},
                            {"rows", out}});
  }
}

}  // namespace

void add_dp_subcommand(CLI::App& app, SubcommandList& list) {
  auto args = std::make_shared<DpArgs>();
  CLI::App* cmd = app.add_subcommand(
      "dp", "Data-parallel training at np 1 and 2, with and without overlap (run at np 2)");
  cmd->add_option("--steps", args->steps, "Timed optimizer steps per round")->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "Untimed steps first")->capture_default_str();
  cmd->add_option("--rounds", args->rounds, "Rounds alternating the three modes; best shown")
      ->capture_default_str();
  add_training_config_options(cmd, args->config, args->overrides, args->json);
  list.push_back({cmd, [args](BenchContext& ctx) {
                    if (args->steps < 1 || args->warmup < 0 || args->rounds < 1) {
                      throw ConfigError("--steps and --rounds must be at least 1 and --warmup "
                                        "at least 0");
                    }
                    run(ctx, *args);
                  }});
}

}  // namespace etr::bench
