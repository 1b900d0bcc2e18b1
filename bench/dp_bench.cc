#include "bench/dp_bench.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
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
#include "runtime/mpi_check.h"
#include "examples/gpt/model_presets.h"

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
  resolve(c, gpt::model_presets());
  return c;
}

struct Row {
  const char* mode = "";
  int ranks = 1;
  bool overlap = true;
  // The GPU's engine and staged communicator on host memory (ETR_TEST_HOST_DEVICE_ENGINE):
  // what the staging protocol costs beside the host reducer.
  bool staged = false;
  double tokens_per_s = 0;  // best round
  double ms_per_step = 0;
  double comm_ms = 0;  // per step, in the best round
  double exposed_ms = 0;
  double hidden = 1;
  double loss = 0;
  std::vector<double> round_tps;  // every round, for the median
  double cores_busy = 0;          // the most any rank kept busy, over the rounds
  std::string cpus;               // each rank's CPUs: "0 | 1"
  std::string refused;            // the first round's premise failure; "" when all held
};

// What a round measured on this rank: its CPU use and the kernels' thread count.
struct RoundUse {
  CpuUse use;
  int threads = 0;
};

// One round of `row` on `group`: tokens/s and the communication figures.
RoundUse measure(const TrainConfig& base, const Group& group, Logger& log, const DpArgs& a,
                 Row& row) {
  TrainConfig c = base;
  c.mutable_parallel()->set_overlap(row.overlap);
  if (row.staged) setenv("ETR_TEST_HOST_DEVICE_ENGINE", "1", 1);
  train::Trainer trainer(c, group, log);
  if (row.staged) unsetenv("ETR_TEST_HOST_DEVICE_ENGINE");
  for (int i = 0; i < a.warmup; ++i) trainer.train_step();
  ReduceStats comm;
  double loss = 0;
  CpuMeter meter;
  const auto t0 = Clock::now();
  for (int i = 0; i < a.steps; ++i) {
    const train::StepStats s = trainer.train_step();
    comm += s.comm;
    loss = s.loss;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const RoundUse used{meter.stop(), cpu::num_threads()};
  const double tokens =
      static_cast<double>(a.steps) * c.batch().global_batch() * c.model().seq_len();
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
  return used;
}

// Collective: the premise of one round of `row` (`mine`: this rank's, or nothing on a
// rank that sat out the single row) against "each rank's threads on cores of their own".
void check_round(const BenchContext& ctx, const RoundUse& mine, Row& row) {
  int threads = mine.threads;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &threads, 1, MPI_INT, MPI_MAX, ctx.world().group().comm()));
  std::vector<CpuUse> uses = ctx.gather_cpu_use(mine.use);
  std::vector<std::string> hosts = ctx.machine().hostnames;
  uses.resize(static_cast<size_t>(row.ranks));
  hosts.resize(uses.size());
  row.cpus.clear();
  for (const CpuUse& u : uses) {
    row.cores_busy = std::max(row.cores_busy, u.cores_busy());
    row.cpus += (row.cpus.empty() ? "" : " | ") + format_cpus(u.cpus);
  }
  // A rank's progress engine shares its core with its compute thread (bench/run_dp.sh),
  // so waiting for the core is part of what is measured; other processes' time on it is
  // not (/proc/stat).
  const Premise premise{.threads = threads, .pinned = true, .max_waiting = -1, .max_others = 0.10};
  const std::string why = ranks_premise_failure(premise, uses, hosts);
  if (row.refused.empty()) row.refused = why;
}

// Refuses before running when the ranks are not bound to cores of their own: the
// "single" row would be one rank on more cores than its threads, and "dp" two ranks
// sharing them.
void check_binding(const BenchContext& ctx, const TrainConfig& config) {
  const int threads = config.runtime().threads();
  if (threads < 1) return;  // the trainer's default: checked after each round
  ctx.require_own_cores("etr-bench dp", {.threads = threads, .pinned = true});
}

// Efficiency = tok/s / (ranks x tok/s of `single`); none when either was refused.
std::optional<double> efficiency(const Row& r, const Row& single) {
  if (!r.refused.empty() || !single.refused.empty()) return std::nullopt;
  return r.tokens_per_s / (r.ranks * single.tokens_per_s);
}

std::string row_text(const Row& r, const Row& single) {
  std::string s = cell("  %-15s  %5d  %7s  %5.2f  ", r.mode, r.ranks, r.cpus.c_str(), r.cores_busy);
  if (!r.refused.empty()) return s + refused_cell(r.refused) + "\n";
  const std::optional<double> eff = efficiency(r, single);
  const std::string eff_cell = eff ? cell("%.0f%%", *eff * 100) : "-";
  if (r.ranks == 1) {
    return s + cell("%9.0f  %8.1f  %8s  %10s  %6s  %10s  %12.0f  %10.4f\n", r.tokens_per_s,
                    r.ms_per_step, "-", "-", "-", eff_cell.c_str(), median(r.round_tps), r.loss);
  }
  return s + cell("%9.0f  %8.1f  %8.2f  %10.2f  %5.0f%%  %10s  %12.0f  %10.4f\n", r.tokens_per_s,
                  r.ms_per_step, r.comm_ms, r.exposed_ms, r.hidden * 100, eff_cell.c_str(),
                  median(r.round_tps), r.loss);
}

nlohmann::json row_json(const Row& r, const Row& single) {
  nlohmann::json j = {
      {"mode", r.mode},
      {"ranks", r.ranks},
      {"overlap", r.overlap},
      {"cpus", r.cpus},
      {"cores_busy", r.cores_busy},
      {"premise_failed", r.refused.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.refused)}};
  if (r.refused.empty()) {
    const std::optional<double> eff = efficiency(r, single);
    j.update({{"tokens_per_s", r.tokens_per_s},
              {"ms_per_step", r.ms_per_step},
              {"comm_ms", r.comm_ms},
              {"exposed_ms", r.exposed_ms},
              {"hidden_fraction", r.hidden},
              {"efficiency", eff ? nlohmann::json(*eff) : nlohmann::json(nullptr)},
              {"final_loss", r.loss},
              {"round_tokens_per_s", r.round_tps}});
  }
  return j;
}

void run(BenchContext& ctx, const DpArgs& a) {
  if (ctx.size() != 2) {
    throw ConfigError(
        "etr-bench dp compares one rank with two; run it with mpirun -np 2 "
        "(bench/run_dp.sh)");
  }
  const TrainConfig config = bench_config(a);
  check_binding(ctx, config);
  const int64_t B = config.batch().global_batch(), T = config.model().seq_len();
  char buf[1024];
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
      "single)\n"
      "# dp staged = the GPU's engine on host memory: each bucket copied to staging, summed by the "
      "host ring, copied back (collectives/staged_communicator.h), overlap on\n"
      "# cpus = each rank's CPUs, busy = the most cores a rank kept busy (CPU / wall time); a "
      "row whose ranks used more cores than their threads, or whose CPUs other processes kept more "
      "than 0.1 cores busy per thread, shows \"premise failed\"\n",
      config.model().n_layer(), config.model().d_model(), config.model().seq_len(),
      static_cast<long long>(B), static_cast<long long>(T), config.batch().micro_batch(),
      config.runtime().threads(), ctx.machine().placement().c_str(),
      config.parallel().first_bucket_size().c_str(), config.parallel().bucket_size().c_str(),
      a.rounds, a.warmup, a.steps);
  ctx.print(buf);
  Logger& log = ctx.world().log();
  const LogLevel level = log.level();
  log.set_level(LogLevel::kWarn);  // the trainer's start-up lines would break the table
  std::vector<Row> rows(4);
  rows[0].mode = "single", rows[0].ranks = 1, rows[0].overlap = true;
  rows[1].mode = "dp overlap on", rows[1].ranks = 2, rows[1].overlap = true;
  rows[2].mode = "dp overlap off", rows[2].ranks = 2, rows[2].overlap = false;
  rows[3].mode = "dp staged", rows[3].ranks = 2, rows[3].overlap = true, rows[3].staged = true;
  Group self(MPI_COMM_SELF, "self", /*owned=*/false);
  for (int round = 0; round < a.rounds; ++round) {
    for (Row& row : rows) {
      RoundUse used;
      if (row.ranks == 1) {
        if (ctx.is_root()) used = measure(config, self, log, a, row);
        ctx.sleeping_barrier();  // rank 1 leaves the cores to rank 0
      } else {
        used = measure(config, ctx.world().group(), log, a, row);
      }
      check_round(ctx, used, row);
    }
  }
  log.set_level(level);
  ctx.print(
      "# mode             ranks     cpus   busy   tokens/s   ms/step   comm ms  exposed ms  "
      "hidden  efficiency  median tok/s  final loss\n");
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    ctx.print(row_text(r, rows[0]));
    out.push_back(row_json(r, rows[0]));
  }
  if (rows[1].refused.empty() && rows[2].refused.empty()) {
    std::snprintf(buf, sizeof buf,
                  "# overlap on / off: %.3fx tokens/s (best rounds), %.3fx (medians)\n",
                  rows[1].tokens_per_s / rows[2].tokens_per_s,
                  median(rows[1].round_tps) / median(rows[2].round_tps));
    ctx.print(buf);
  }
  if (rows[1].refused.empty() && rows[3].refused.empty()) {
    std::snprintf(buf, sizeof buf, "# staged / host reducer: %.3fx tokens/s (best rounds), %.3fx (medians)\n",
                  rows[3].tokens_per_s / rows[1].tokens_per_s,
                  median(rows[3].round_tps) / median(rows[1].round_tps));
    ctx.print(buf);
  }
  if (!a.json.empty()) {
    ctx.write_json(a.json, {{"benchmark", "dp"},
                            {"config", format_config(config)},
                            {"machine", ctx.machine().to_json()},
                            {"steps", a.steps},
                            {"warmup", a.warmup},
                            {"rounds", a.rounds},
                            {"rows", out}});
  }
  const int refused = static_cast<int>(
      std::count_if(rows.begin(), rows.end(), [](const Row& r) { return !r.refused.empty(); }));
  if (refused) throw_refused(refused);
}

}  // namespace

void add_dp_subcommand(CLI::App& app, SubcommandList& list) {
  auto args = std::make_shared<DpArgs>();
  CLI::App* cmd = app.add_subcommand(
      "dp", "Data-parallel training at np 1 and 2, with and without overlap (run at np 2)");
  cmd->add_option("--steps", args->steps, "Timed optimizer steps per round")->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "Untimed steps first")->capture_default_str();
  cmd->add_option("--rounds", args->rounds, "Rounds alternating the four modes; best shown")
      ->capture_default_str();
  add_training_config_options(cmd, args->config, args->overrides, args->json);
  list.push_back({cmd, [args](BenchContext& ctx) {
                    if (args->steps < 1 || args->warmup < 0 || args->rounds < 1) {
                      throw ConfigError(
                          "--steps and --rounds must be at least 1 and --warmup "
                          "at least 0");
                    }
                    run(ctx, *args);
                  }});
}

}  // namespace etr::bench
