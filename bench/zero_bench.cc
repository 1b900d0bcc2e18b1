// `etr-bench zero`: ZeRO stages 0-3 on the ranks of the job (bench/run_zero.sh runs np 2
// and 4): per-rank state bytes beside the ZeRO paper's figure, the allocator's measured
// peak, the collective volume per step beside the theory (2 Psi for stages 0-2, 3 Psi for
// stage 3), and tokens/s of each stage relative to stage 0 in the same run (rounds
// alternate the stages; the best round is shown).
#include "bench/zero_bench.h"

#include <algorithm>
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

using Clock = std::chrono::steady_clock;

struct ZeroArgs {
  int steps = 8;
  int warmup = 2;
  int rounds = 3;
  std::string config;
  std::vector<std::string> overrides;
  std::string json;
};

// The dp benchmark's model: "small" (3.26 M parameters), global batch 8 x 128 tokens,
// micro-batch 4, one thread per rank, the default buckets.
TrainConfig bench_config(const ZeroArgs& a) {
  TrainConfig c = bench_train_config(R"(model { preset: "small" }
                                        batch { global_batch: 8 micro_batch: 4 })",
                                     1, "etr-bench zero", a.config, a.overrides);
  resolve(c, gpt::model_presets());
  return c;
}

struct Row {
  int stage = 0;
  bool accumulate = false;     // two micro-batches per rank and step
  EngineMemory memory;
  size_t largest_layer = 0;    // stage 3: the most one layer gathers
  size_t peak = 0;             // the allocator's peak on the rank with the most
  double volume_psi = 0;       // collective volume per step / (4 Psi bytes)
  double tokens_per_s = 0;     // best round
  std::vector<double> round_tps;
  double loss = 0;
};

// Collective volume of one step in bytes: an allreduced bucket counts twice (its
// reduce-scatter and all-gather phases), a reduce-scattered or gathered one once.
double step_volume(const Engine& e, const ReduceStats& comm, int64_t gathered) {
  if (e.zero_stage() == 0) return 2.0 * static_cast<double>(comm.bytes);
  const auto& z = dynamic_cast<const ZeroEngine&>(e);
  const double tail = static_cast<double>(z.plan().replicated_numel()) * sizeof(float);
  return static_cast<double>(comm.bytes) + tail + static_cast<double>(gathered);
}

void measure(BenchContext& ctx, const TrainConfig& base, const ZeroArgs& a, Row& row) {
  TrainConfig c = base;
  c.mutable_parallel()->set_zero_stage(row.stage);
  if (row.accumulate) {  // two micro-batches per rank
    const int64_t share = c.batch().global_batch() / ctx.size();
    c.mutable_batch()->set_micro_batch(static_cast<int32_t>(std::max<int64_t>(1, share / 2)));
  }
  train::Trainer t(c, ctx.world().group(), ctx.world().log());
  for (int i = 0; i < a.warmup; ++i) t.train_step();
  Engine& e = t.session().engine();
  auto gathered = [&]() -> int64_t {
    auto* z = dynamic_cast<ZeroEngine*>(&e);
    return z ? z->gathered_bytes() : 0;
  };
  const int64_t g0 = gathered();
  ReduceStats comm;
  const auto t0 = Clock::now();
  for (int i = 0; i < a.steps; ++i) {
    const train::StepStats s = t.train_step();
    comm += s.comm;
    row.loss = s.loss;
  }
  const double secs = ctx.max_over_ranks(std::chrono::duration<double>(Clock::now() - t0).count());
  const double tps = static_cast<double>(a.steps) * c.batch().global_batch() * c.model().seq_len() / secs;
  row.round_tps.push_back(tps);
  row.tokens_per_s = std::max(row.tokens_per_s, tps);
  row.memory = e.memory();
  if (auto* z = dynamic_cast<ZeroEngine*>(&e)) row.largest_layer = z->largest_layer_bytes();
  double peak = static_cast<double>(t.session().allocator().stats().peak);
  row.peak = static_cast<size_t>(ctx.max_over_ranks(peak));
  const double psi_bytes = static_cast<double>(row.memory.psi) * sizeof(float);
  comm.bytes /= static_cast<size_t>(a.steps);
  row.volume_psi = step_volume(e, comm, (gathered() - g0) / a.steps) / psi_bytes;
}

double theory_volume(int stage) { return stage == 3 ? 3.0 : 2.0; }

std::string bytes_or_dash(size_t b, bool shown) {
  return shown ? format_bytes(static_cast<double>(b)) : "-";
}

std::string row_text(const Row& r, const Row& zero) {
  const EngineMemory& m = r.memory;
  const double state = static_cast<double>(m.state_bytes());
  const double analytic = m.analytic_bytes();
  return cell("  %5d%-4s  %10s  %10s  %6.1f%%  %10s  %10s  %10s  %10s  %7.2f  %6.1f  %8.0f  %8.0f  %7.1f%%  %9.4f\n",
              r.stage, r.accumulate ? " acc" : "", format_bytes(state).c_str(), format_bytes(analytic).c_str(),
              (state / analytic - 1) * 100, bytes_or_dash(m.unreduced_peak, r.stage >= 2).c_str(),
              bytes_or_dash(m.gathered_peak, r.stage == 3).c_str(),
              bytes_or_dash(r.largest_layer, r.stage == 3).c_str(),
              format_bytes(static_cast<double>(r.peak)).c_str(), r.volume_psi,
              theory_volume(r.stage), r.tokens_per_s, median(r.round_tps),
              100 * r.tokens_per_s / zero.tokens_per_s, r.loss);
}

nlohmann::json row_json(const Row& r, const Row& zero) {
  const EngineMemory& m = r.memory;
  return {{"stage", r.stage},
          {"accumulation", r.accumulate},
          {"ranks", m.ranks},
          {"psi", m.psi},
          {"state_bytes", m.state_bytes()},
          {"params_bytes", m.params},
          {"grads_bytes", m.grads},
          {"optimizer_bytes", m.optimizer},
          {"analytic_bytes", m.analytic_bytes()},
          {"unreduced_grad_peak_bytes", m.unreduced_peak},
          {"gathered_param_peak_bytes", m.gathered_peak},
          {"largest_layer_gather_bytes", r.largest_layer},
          {"allocator_peak_bytes", r.peak},
          {"volume_psi", r.volume_psi},
          {"volume_theory_psi", theory_volume(r.stage)},
          {"tokens_per_s", r.tokens_per_s},
          {"relative_to_stage0", r.tokens_per_s / zero.tokens_per_s},
          {"round_tokens_per_s", r.round_tps},
          {"final_loss", r.loss}};
}

void run(BenchContext& ctx, const ZeroArgs& a) {
  const TrainConfig config = bench_config(a);
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "# etr-bench zero: GPT-2 n_layer=%d d_model=%d seq_len=%d, global batch %lld, "
                "micro-batch %d, %d thread(s) per rank, %d ranks\n# %s\n"
                "# %d round(s) alternating the stages, best tokens/s shown (and the median); %d "
                "warm-up + %d timed steps; \"acc\": two micro-batches per rank and step\n"
                "# state = parameters + gradients + optimizer held per rank; paper = the ZeRO "
                "paper's figure (16 Psi, 8 Psi + 8 Psi/N, 4 Psi + 12 Psi/N, 16 Psi/N);\n"
                "# unreduced = most gradient bytes not reduced yet at once (stages 2-3); gathered = "
                "most parameter bytes gathered at once, 1 layer's = the largest layer's buckets "
                "(stage 3: the current and the prefetched next layer);\n# peak = the allocator's, "
                "all buffers (activations included); volume = collective bytes per step / 4 Psi\n",
                config.model().n_layer(), config.model().d_model(), config.model().seq_len(),
                static_cast<long long>(config.batch().global_batch()), config.batch().micro_batch(),
                config.runtime().threads(), ctx.size(), ctx.machine().placement().c_str(), a.rounds,
                a.warmup, a.steps);
  ctx.print(buf);
  Logger& log = ctx.world().log();
  const LogLevel level = log.level();
  log.set_level(LogLevel::kWarn);
  // Stages 0-3, then 2 and 3 with two micro-batches per rank (the full gradients are
  // kept until the last one: more unreduced gradient memory, the same volume).
  std::vector<Row> rows(6);
  for (int s = 0; s < 4; ++s) rows[s].stage = s;
  rows[4].stage = 2, rows[4].accumulate = true;
  rows[5].stage = 3, rows[5].accumulate = true;
  for (int round = 0; round < a.rounds; ++round) {
    for (Row& r : rows) measure(ctx, config, a, r);
  }
  log.set_level(level);
  ctx.print("# stage           state       paper     diff   unreduced    gathered   1 layer's"
            "        peak   volume  theory  tokens/s    median  vs stage0      loss\n");
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    ctx.print(row_text(r, rows[0]));
    out.push_back(row_json(r, rows[0]));
  }
  if (!a.json.empty()) {
    ctx.write_json(a.json, {{"benchmark", "zero"},
                            {"config", format_config(config)},
                            {"machine", ctx.machine().to_json()},
                            {"steps", a.steps},
                            {"rounds", a.rounds},
                            {"rows", out}});
  }
}

}  // namespace

void add_zero_subcommand(CLI::App& app, SubcommandList& list) {
  auto args = std::make_shared<ZeroArgs>();
  CLI::App* cmd = app.add_subcommand(
      "zero", "ZeRO stages 0-3: state memory, collective volume and tokens/s (bench/run_zero.sh)");
  cmd->add_option("--steps", args->steps, "Timed optimizer steps per round")->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "Untimed steps first")->capture_default_str();
  cmd->add_option("--rounds", args->rounds, "Rounds alternating the stages; best shown")
      ->capture_default_str();
  add_training_config_options(cmd, args->config, args->overrides, args->json);
  list.push_back({cmd, [args](BenchContext& ctx) {
                    if (args->steps < 1 || args->warmup < 0 || args->rounds < 1) {
                      throw ConfigError("--steps and --rounds must be at least 1 and --warmup at least 0");
                    }
                    run(ctx, *args);
                  }});
}

}  // namespace etr::bench
