// `etr-bench pipeline`: every pipeline schedule at pp = the job's ranks (bench/run_pipeline.sh
// runs np 2, one core per stage), for m = 1, 2, 4, 8, 16
// micro-batches per step: tokens/s, the measured bubble (1 - compute / wall of the
// schedule's actions, averaged over the stages and the timed steps) beside the schedule's
// theory ((P-1)/(m+P-1) for GPipe and 1F1B, (P-1)/(v m+P-1) interleaved, ZB-H1's
// theoretical_bubble), and the
// activation memory each stage planned.
#include "bench/pipeline_bench.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_context.h"
#include "examples/gpt/model_presets.h"
#include "examples/train/trainer.h"
#include "runtime/bytes.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"

namespace etr::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct PipelineArgs {
  int steps = 8;
  int warmup = 2;  // ZB-V places its list again from the second step's times
  int rounds = 2;
  std::vector<int> micro_batches{1, 2, 4, 8, 16};
  std::vector<std::string> schedules{"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"};
  std::string config;
  std::vector<std::string> overrides;
  std::string json;
};

struct Row {
  std::string schedule;
  int m = 0;
  double theory = 0;
  double list = 0;    // the schedule's own list simulated with equal F, B, W
  double costed = 0;  // the same list simulated with the measured mean F, B, W (and backward) times
  ActionCosts costs;  // those means, seconds
  bool placed = false;  // ZB-V: the list running was placed at measured times
  double recv_wait_ms = 0, send_wait_ms = 0;  // per step, mean over the stages
  double post_ms = 0, engine_ms = 0;          // the same: posting transfers, engine calls
  double bubble = 0;  // measured: per step the mean over the stages; the median step
  double tokens_per_s = 0;
  std::vector<double> activation_bytes;  // per stage
  std::vector<double> compute_ms;        // per stage: forward + backward per step
  double wall_ms = 0;                    // the schedule's actions per step (rank 0)
  double norm_min_ms = 0, norm_max_ms = 0;  // the gradient norm's wait, per step: least, most rank
  double loss = 0;
};

TrainConfig bench_config(const PipelineArgs& a, int P, const std::string& schedule, int m) {
  TrainConfig c = bench_train_config(R"(model { preset: "small" }
                                        batch { global_batch: 8 micro_batch: 2 })",
                                     1, "etr-bench pipeline", a.config, a.overrides);
  apply_overrides(c, {"parallel.pp=" + std::to_string(P), "parallel.pp_schedule=" + schedule,
                      "batch.global_batch=" + std::to_string(m * c.batch().micro_batch())});
  resolve(c, gpt::model_presets());
  return c;
}

Row measure(BenchContext& ctx, const PipelineArgs& a, const std::string& schedule, int m) {
  const int P = ctx.size();
  const TrainConfig config = bench_config(a, P, schedule, m);
  Row r;
  r.schedule = schedule;
  r.m = m;
  train::Trainer t(config, ctx.world());
  PipelineEngine& p = *t.pipeline();
  r.theory = theoretical_bubble(p.executor().schedule().spec);
  r.list = simulate_schedule(p.executor().schedule()).bubble_fraction;
  for (int i = 0; i < a.warmup; ++i) t.train_step();
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<double> bubbles;  // per step, summed over the ranks below
  double compute = 0;
  // Sums over the timed steps: seconds and counts of F, fused backward, B, W; the waits.
  double parts[12] = {};
  const auto t0 = Clock::now();
  for (int i = 0; i < a.steps; ++i) {
    r.loss = t.train_step().loss;
    bubbles.push_back(p.executor().last_step().bubble());
    compute += p.executor().last_step().compute_seconds;
    r.wall_ms += 1e3 * p.executor().last_step().wall_seconds / a.steps;
    r.norm_min_ms += 1e3 * p.norm_wait_seconds() / a.steps;
    const PipelineStepStats& s = p.executor().last_step();
    const double step[12] = {s.forward_seconds, double(s.forwards), s.backward_seconds, double(s.backwards),
                             s.input_grad_seconds, double(s.input_grads), s.weight_grad_seconds,
                             double(s.weight_grads), s.recv_wait_seconds, s.send_wait_seconds,
                             s.transfer_seconds, s.engine_seconds};
    for (int k = 0; k < 12; ++k) parts[k] += step[k];
  }
  MPI_Allreduce(MPI_IN_PLACE, parts, 12, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  ActionCosts costs;  // the list at the measured means (a fused backward split in halves)
  costs.forward = parts[1] > 0 ? parts[0] / parts[1] : 1;
  if (parts[5] > 0) {
    costs.backward_input = parts[4] / parts[5];
    costs.backward_weight = parts[7] > 0 ? parts[6] / parts[7] : 0;
  } else {
    costs.backward_input = costs.backward_weight = parts[3] > 0 ? parts[2] / parts[3] / 2 : 1;
  }
  r.costed = simulate_schedule(p.executor().schedule(), costs).bubble_fraction;
  r.costs = costs;
  r.placed = p.list_adapted();
  r.recv_wait_ms = 1e3 * parts[8] / (a.steps * P);
  r.send_wait_ms = 1e3 * parts[9] / (a.steps * P);
  r.post_ms = 1e3 * parts[10] / (a.steps * P);
  r.engine_ms = 1e3 * parts[11] / (a.steps * P);
  r.norm_max_ms = r.norm_min_ms;
  MPI_Allreduce(MPI_IN_PLACE, &r.norm_min_ms, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &r.norm_max_ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  compute *= 1e3 / a.steps;
  r.compute_ms.resize(static_cast<size_t>(P));
  MPI_Allgather(&compute, 1, MPI_DOUBLE, r.compute_ms.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.tokens_per_s = static_cast<double>(a.steps) * config.batch().global_batch() *
                   config.model().seq_len() / seconds;
  MPI_Allreduce(MPI_IN_PLACE, bubbles.data(), static_cast<int>(bubbles.size()), MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  r.bubble = median(bubbles) / P;  // robust to a step the machine took away
  double mine = static_cast<double>(p.executor().planned_bytes());
  r.activation_bytes.resize(static_cast<size_t>(P));
  MPI_Allgather(&mine, 1, MPI_DOUBLE, r.activation_bytes.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD);
  return r;
}

// The reference: the same model and global batch on one rank (world rank 0; the others
// wait), tokens/s.
double one_rank_tokens_per_s(BenchContext& ctx, const PipelineArgs& a, int m) {
  double tps = 0;
  if (ctx.world().rank() == 0) {
    TrainConfig c = bench_config(a, 1, "1f1b", m);
    Group self(MPI_COMM_SELF, "self", false);
    train::Trainer t(c, self, ctx.world().log());
    for (int i = 0; i < a.warmup; ++i) t.train_step();
    const auto t0 = Clock::now();
    for (int i = 0; i < a.steps; ++i) t.train_step();
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    tps = static_cast<double>(a.steps) * c.batch().global_batch() * c.model().seq_len() / seconds;
  }
  MPI_Bcast(&tps, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return tps;
}

std::string row_text(const Row& r) {
  std::string act, ms;
  for (double b : r.activation_bytes) act += (act.empty() ? "" : " | ") + format_bytes(b);
  for (double c : r.compute_ms) {
    char x[32];
    std::snprintf(x, sizeof x, "%s%.1f", ms.empty() ? "" : " | ", c);
    ms += x;
  }
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%12s %4d %9.1f%% %9.1f%% %+8.1f %7.1f%% %7.1f%% %+7.1f %10.0f %8.1f %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f   %-15s  %s\n",
                r.schedule.c_str(), r.m, 100 * r.bubble, 100 * r.theory, 100 * (r.bubble - r.theory),
                100 * r.list, 100 * r.costed, 100 * (r.bubble - r.costed), r.tokens_per_s, r.wall_ms,
                r.recv_wait_ms, r.send_wait_ms, r.post_ms, r.engine_ms, r.norm_min_ms, r.norm_max_ms, ms.c_str(), act.c_str());
  return buf;
}

void run(BenchContext& ctx, const PipelineArgs& a) {
  const int P = ctx.size();
  if (P < 2) throw ConfigError("etr-bench pipeline needs at least 2 ranks (one per stage)");
  const TrainConfig c = bench_config(a, P, "1f1b", P);
  char buf[2048];
  std::snprintf(buf, sizeof buf,
                "# etr-bench pipeline: GPT-2 n_layer=%d d_model=%d seq_len=%d, micro-batch %d, "
                "pp %d (dp 1), 1 thread per rank\n# %s\n# %d round(s) alternating the rows, each row's best (tokens/s); %d warm-up + %d timed steps per row; "
                "bubble = 1 - compute / wall of the schedule's actions, mean over stages, median step; "
                "theory: (P-1)/(m+P-1), interleaved (P-1)/(v m+P-1), ZB-H1 (P-1)/(3m+P-1) (Qi et al.) for m >= P, 1 - 3m/(2m+2P-1) below; ZB-V (P-1)/(6m+P-1) (m >= 2P); list = "
                "the schedule's own lists simulated with equal forward, B and W times; costed = the lists run "
                "(ZB-V's placed again at the measured times after its second step) simulated with the measured mean forward, B, W (fused backward) times, and excess = measured - "
                "costed: what the transfers and the host cost beyond the lists at the real times; recv / send = "
                "ms per step waiting for a received activation or gradient / for a send to free its buffer, "
                "mean over stages; post = ms per step posting sends and receives on the stage's thread; engine = ms per step in the engine's calls (gathers, gradient pages, reductions launched: inside compute); norm = the wait in the "
                "gradient norm's sum over the stages per step, least and most waiting rank (the least: the "
                "sum itself; the rest: the flush the bubble counts); activations = planned per stage\n",
                c.model().n_layer(), c.model().d_model(), c.model().seq_len(), c.batch().micro_batch(),
                P, ctx.machine().placement().c_str(), a.rounds, a.warmup, a.steps);
  ctx.print(buf);
  Logger& log = ctx.world().log();
  const LogLevel level = log.level();
  log.set_level(LogLevel::kWarn);
  // Rounds alternate the rows (a slow spell of the machine hits one round of each, not
  // all of one schedule); each row is its best round's (tokens/s), all rounds in the JSON.
  std::vector<Row> rows;
  std::vector<std::vector<double>> round_tps;
  for (int round = 0; round < a.rounds; ++round) {
    size_t i = 0;
    for (const std::string& s : a.schedules) {
      for (int m : a.micro_batches) {
        if (s == "interleaved" && m % P != 0) continue;  // the schedule needs m a multiple of P
        if (s == "zb-v" && m < 2 * P) continue;          // the V needs m >= 2P
        Row r = measure(ctx, a, s, m);
        if (round == 0) rows.push_back(r), round_tps.emplace_back();
        if (r.tokens_per_s > rows[i].tokens_per_s) rows[i] = r;
        round_tps[i++].push_back(r.tokens_per_s);
      }
    }
  }
  const int ref_m = std::max(8, P);
  const double one_rank = one_rank_tokens_per_s(ctx, a, ref_m);
  log.set_level(level);
  std::snprintf(buf, sizeof buf, "# reference: the same model on 1 rank, global batch %d x %d: %.0f tokens/s\n",
                ref_m, c.batch().micro_batch(), one_rank);
  ctx.print(buf);
  ctx.print("#   schedule    m   measured     theory   points     list   costed  excess   tokens/s  wall ms "
            "  recv   send   post engine norm ms (min max)  compute ms/stage activations per stage\n");
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    ctx.print(row_text(r));
    out.push_back({{"schedule", r.schedule}, {"micro_batches", r.m}, {"bubble", r.bubble},
                   {"theory", r.theory}, {"list", r.list}, {"costed", r.costed},
                   {"forward_ms", 1e3 * r.costs.forward}, {"input_grad_ms", 1e3 * r.costs.backward_input},
                   {"weight_grad_ms", 1e3 * r.costs.backward_weight}, {"placed_at_measured_times", r.placed},
                   {"round_tokens_per_s", round_tps[i]},
                   {"recv_wait_ms", r.recv_wait_ms}, {"send_wait_ms", r.send_wait_ms},
                   {"post_ms", r.post_ms}, {"engine_ms", r.engine_ms},
                   {"tokens_per_s", r.tokens_per_s},
                   {"wall_ms", r.wall_ms}, {"compute_ms", r.compute_ms},
                   {"norm_wait_min_ms", r.norm_min_ms}, {"norm_wait_max_ms", r.norm_max_ms},
                   {"activation_bytes", r.activation_bytes}, {"final_loss", r.loss}});
  }
  if (!a.json.empty()) {
    ctx.write_json(a.json, {{"benchmark", "pipeline"},
                            {"machine", ctx.machine().to_json()},
                            {"steps", a.steps},
                            {"one_rank_tokens_per_s", one_rank},
                            {"rows", out}});
  }
}

}  // namespace

void add_pipeline_subcommand(CLI::App& app, SubcommandList& list) {
  auto args = std::make_shared<PipelineArgs>();
  CLI::App* cmd = app.add_subcommand(
      "pipeline", "Pipeline schedules: measured vs theoretical bubble, tokens/s, activations (bench/run_pipeline.sh)");
  cmd->add_option("--steps", args->steps, "Timed optimizer steps per row")->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "Untimed steps first")->capture_default_str();
  cmd->add_option("--rounds", args->rounds, "Rounds alternating the rows; each row's best shown")
      ->capture_default_str();
  cmd->add_option("--micro-batches", args->micro_batches, "Micro-batches per step (m) to measure")
      ->capture_default_str();
  cmd->add_option("--schedules", args->schedules, "Schedules to measure")->capture_default_str();
  add_training_config_options(cmd, args->config, args->overrides, args->json);
  list.push_back({cmd, [args](BenchContext& ctx) {
                    if (args->steps < 1 || args->warmup < 0 || args->rounds < 1) {
                      throw ConfigError("--steps and --rounds must be at least 1 and --warmup at least 0");
                    }
                    run(ctx, *args);
                  }});
}

}  // namespace etr::bench
