// `etr-bench batch`: the batch policy (parallel/train_session.h "Memory" and "Shares",
// parallel/goodput.h) on the "small" GPT-2, one thread per rank (bench/run_batch.sh: np 2),
// each table beside a reference measured in the same run: memory (the model's predicted
// peak beside the allocator's measured one), auto (batch.micro_batch = auto beside the
// default 4, roomy and tight budgets, a budget cut inside a step), shares (throughput vs
// equal shares with a rank at half speed, and no slow rank), noise (the noise scale
// estimator on a synthetic problem with a known noise scale; the goodput decision's cost).
// A configuration that fails with an etr::Error (agreed by every rank) is reported in its
// row; a CommError (a peer gone, or ranks in different collectives) ends the bench.
#include "bench/batch_bench.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "bench/batch_noise.h"
#include "bench/bench_context.h"
#include "bench/table.h"
#include "examples/gpt/model_presets.h"
#include "examples/train/trainer.h"
#include "parallel/goodput.h"
#include "runtime/bytes.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"
#include "runtime/memory_budget.h"

namespace etr::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr const char* kTables[] = {"memory", "auto", "shares", "noise"};

struct BatchArgs {
  int steps = 6;          // timed steps per row (auto, shares)
  int warmup = 4;         // untimed steps first (shares: the balancer settles; auto: 1)
  int memory_steps = 3;   // steps per memory row
  int noise_steps = 200;  // simulated steps per noise estimate
  std::vector<std::string> only{std::begin(kTables), std::end(kTables)};
  std::string config;
  std::vector<std::string> overrides;
  std::string json;
  bool wants(const std::string& t) const {
    return std::find(only.begin(), only.end(), t) != only.end();
  }
};

std::string num(int64_t v) {
  return std::to_string(v);
}

// The small GPT-2 at `global_batch`, then `set` (after the user's --set).
TrainConfig bench_config(const BatchArgs& a, int global_batch,
                         const std::vector<std::string>& set) {
  TrainConfig c = bench_train_config(R"(model { preset: "small" }
                                        batch { global_batch: 16 micro_batch: 4 })",
                                     1, "etr-bench batch", a.config, a.overrides);
  apply_overrides(c, {"batch.global_batch=" + num(global_batch)});
  apply_overrides(c, set);
  resolve(c, gpt::model_presets());
  return c;
}

// name=value in the environment while it lives (nothing for an empty name).
struct ScopedEnv {
  ScopedEnv(const std::string& n, const std::string& v) : name(n) {
    if (!name.empty()) setenv(name.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    if (!name.empty()) unsetenv(name.c_str());
  }
  std::string name;
};

// Runs one configuration on every rank: "" when it ran, else the sentence of the lowest
// failing rank (the same on every rank). An etr::Error ends the row, not the bench.
std::string guarded(const BenchContext& ctx, const std::function<void()>& f) {
  std::string local;
  try {
    f();
  } catch (const CommError&) {
    throw;  // a collective that did not complete: the ranks are no longer in step
  } catch (const AgreedError&) {
    throw;
  } catch (const Error& e) {
    local = e.what();
  }
  try {
    ctx.agree(local);
  } catch (const AgreedError& e) {
    return e.what();
  }
  return "";
}

// Collective: every rank's `mine`, in rank order.
std::vector<double> all_ranks(const BenchContext& ctx, double mine) {
  std::vector<double> all(static_cast<size_t>(ctx.size()));
  MPI_Allgather(&mine, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, ctx.world().group().comm());
  return all;
}

std::string joined(const std::vector<double>& v, bool bytes) {
  std::string s;
  for (double x : v)
    s += (s.empty() ? "" : " | ") + (bytes ? format_bytes(x) : num(std::llround(x)));
  return s;
}

// 1. Memory model.

struct MemoryCase {
  std::string name;
  std::vector<std::string> set;  // at global batch 16
};

std::vector<MemoryCase> memory_cases() {
  const auto mb = [](int b) { return "batch.micro_batch=" + num(b); };
  const auto zero = [](int z) { return "parallel.zero_stage=" + num(z); };
  std::vector<MemoryCase> c;
  for (int b : {1, 2, 4, 8}) c.push_back({"zero 0, b " + num(b), {mb(b), zero(0)}});
  for (int z : {1, 2, 3}) c.push_back({"zero " + num(z) + ", b 4", {mb(4), zero(z)}});
  for (int b : {2, 8})
    c.push_back({"recompute blocks, b " + num(b), {mb(b), "runtime.recompute=blocks"}});
  for (std::string s : {"gpipe", "1f1b", "zb-h1", "zb-v"}) {
    c.push_back({"pp 2 " + s + ", b 2", {mb(2), "parallel.pp=2", "parallel.pp_schedule=" + s}});
  }
  c.push_back({"pp 2 zero 3, b 2", {mb(2), "parallel.pp=2", zero(3)}});
  return c;
}

struct MemoryRow {
  std::string name, error;
  int64_t micro_batch = 0, accumulation = 0;  // rank 0's
  bool recompute = false;
  std::vector<double> predicted, measured;  // the allocator's peak bytes per rank
  double worst = 0;  // (predicted - measured) / measured, the largest in size over the ranks
  // The kernel's count: outside the allocator (measured after the first step), the model's
  // resident peak (predicted + outside), VmHWM; the worst error of the one against the other.
  std::vector<double> outside, predicted_resident, resident;
  double worst_resident = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(MemoryRow, name, error, micro_batch, accumulation, recompute,
                                   predicted, measured, worst, outside, predicted_resident, resident,
                                   worst_resident)

double worst_error(const std::vector<double>& predicted, const std::vector<double>& measured) {
  double worst = 0;
  for (size_t i = 0; i < measured.size(); ++i) {
    const double e = measured[i] > 0 ? (predicted[i] - measured[i]) / measured[i] : 1;
    if (std::abs(e) > std::abs(worst)) worst = e;
  }
  return worst;
}

MemoryRow measure_memory(BenchContext& ctx, const BatchArgs& a, const MemoryCase& mc) {
  MemoryRow r;
  r.name = mc.name;
  r.error = guarded(ctx, [&] {
    train::Trainer t(bench_config(a, 16, mc.set), ctx.world());
    // VmHWM of the steps, from what is resident now: the construction's transients are
    // not a step's (a pipeline's world rank 0 holds the whole model's initial parameters
    // while it hands them to the stages).
    reset_peak_resident();
    for (int i = 0; i < a.memory_steps; ++i) t.train_step();
    TrainSession& s = t.session();
    r.micro_batch = static_cast<int64_t>(s.rank_batch().micro_batch);
    r.accumulation = static_cast<int64_t>(s.rank_batch().accumulation);
    r.recompute = s.recompute();
    r.predicted = all_ranks(ctx, static_cast<double>(s.predicted_peak()));
    r.measured = all_ranks(ctx, static_cast<double>(s.allocator().stats().peak));
    r.outside = all_ranks(ctx, static_cast<double>(s.outside_bytes()));
    r.predicted_resident = all_ranks(ctx, static_cast<double>(s.predicted_resident_peak()));
    r.resident = all_ranks(ctx, static_cast<double>(peak_resident_bytes()));
  });
  r.worst = worst_error(r.predicted, r.measured);
  r.worst_resident = worst_error(r.predicted_resident, r.resident);
  return r;
}

json memory_table(BenchContext& ctx, const BatchArgs& a) {
  ctx.print(
      cell("\n# 1. memory model: TrainSession::predicted_peak() beside the allocator's measured "
          "peak after %d steps, each rank; error = (predicted - measured) / measured, the "
          "largest over the ranks; global batch 16, b x k = rank 0's micro-batch x count\n"
          "#   and the kernel's count: the model's resident peak (predicted + what the process "
          "holds outside the allocator, measured once after the first step) beside VmHWM "
          "(reset once the row's trainer is built)\n"
          "#   configuration           b x k   recompute  predicted per rank     "
          "measured per rank        error\n",
          a.memory_steps));
  json rows = json::array();
  double worst = 0, worst_resident = 0;
  for (const MemoryCase& mc : memory_cases()) {
    const MemoryRow r = measure_memory(ctx, a, mc);
    if (!r.error.empty()) {
      ctx.print("  " + r.name + ": fails: " + r.error + "\n");
      rows.push_back(r);
      continue;
    }
    if (std::abs(r.worst) > std::abs(worst)) worst = r.worst;
    ctx.print(cell("  %-24s %3lld x %-3lld %-9s  %-22s %-22s %+7.2f %%%s\n", r.name.c_str(),
                  static_cast<long long>(r.micro_batch), static_cast<long long>(r.accumulation),
                  r.recompute ? "blocks" : "off", joined(r.predicted, true).c_str(),
                  joined(r.measured, true).c_str(), 100 * r.worst,
                  std::abs(r.worst) > 0.05 ? "  (over 5 %)" : ""));
    if (std::abs(r.worst_resident) > std::abs(worst_resident)) worst_resident = r.worst_resident;
    ctx.print(cell("    kernel: outside %s; resident %-22s VmHWM %-22s %+7.2f %%%s\n",
                  joined(r.outside, true).c_str(), joined(r.predicted_resident, true).c_str(),
                  joined(r.resident, true).c_str(), 100 * r.worst_resident,
                  std::abs(r.worst_resident) > 0.05 ? "  (over 5 %)" : ""));
    rows.push_back(r);
  }
  ctx.print(cell("# worst error %.1f %% against the allocator, %.1f %% against the kernel (bar: 5 %%)\n",
                 100 * std::abs(worst), 100 * std::abs(worst_resident)));
  return {{"rows", rows}, {"worst_error", std::abs(worst)}, {"worst_resident_error", std::abs(worst_resident)}};
}

// 2 and 3. Timed runs.

struct RunRow {
  std::string name, error;
  int64_t micro_batch = 0, accumulation = 0;  // rank 0's at the end
  bool recompute = false;
  int64_t oom_recoveries = 0, share_rebalances = 0;
  std::vector<double> shares;       // samples per rank at the end
  std::vector<double> model_peaks;  // the memory model at b = 1..4, the most of any rank
  double step_seconds = 0, tokens_per_s = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RunRow, name, error, micro_batch, accumulation, recompute,
                                   oom_recoveries, share_rebalances, shares, step_seconds,
                                   tokens_per_s)

// `warmup` untimed steps, then a.steps timed ones, at global batch 32; `env` (NAME=VALUE)
// is in the environment while the Trainer is built (it reads it then).
RunRow measure_run(BenchContext& ctx, const BatchArgs& a, const std::string& name,
                   const std::vector<std::string>& set, const std::string& env = "",
                   int warmup = 1) {
  RunRow r;
  r.name = name;
  r.error = guarded(ctx, [&] {
    const TrainConfig c = bench_config(a, 32, set);
    std::unique_ptr<train::Trainer> t;
    {
      const size_t eq = env.find('=');
      ScopedEnv scoped(env.substr(0, eq), eq == std::string::npos ? "" : env.substr(eq + 1));
      t = std::make_unique<train::Trainer>(c, ctx.world());
    }
    for (int i = 0; i < warmup; ++i) t->train_step();
    MPI_Barrier(ctx.world().group().comm());
    const auto t0 = Clock::now();
    for (int i = 0; i < a.steps; ++i) t->train_step();
    const double seconds = ctx.max_over_ranks(seconds_since(t0));
    r.step_seconds = seconds / a.steps;
    r.tokens_per_s = static_cast<double>(a.steps) * 32 * c.model().seq_len() / seconds;
    TrainSession& s = t->session();
    r.micro_batch = static_cast<int64_t>(s.rank_batch().micro_batch);
    r.accumulation = static_cast<int64_t>(s.rank_batch().accumulation);
    r.recompute = s.recompute();
    r.oom_recoveries = s.oom_recoveries();
    r.share_rebalances = s.share_rebalances();
    for (const RankBatch& rb : s.batch_plan().ranks())
      r.shares.push_back(static_cast<double>(rb.samples()));
    for (int b = 1; b <= 4; ++b) r.model_peaks.push_back(s.memory_model().peak(b, false));
    ctx.max_over_ranks(r.model_peaks.data(), 4);
  });
  return r;
}

// A budget where micro-batch 4 does not fit but 2 does with the automatic margin: midway
// between the memory model's peak at 2 (over 1 - margin) and at 4. 0 when there is none.
size_t tight_budget(const RunRow& roomy, double margin) {
  if (roomy.model_peaks.size() < 4) return 0;
  const double lo = roomy.model_peaks[1] / (1 - margin), hi = roomy.model_peaks[3];
  return lo < hi ? static_cast<size_t>((lo + hi) / 2) : 0;
}

void print_auto_row(const BenchContext& ctx, const RunRow& r, const std::string& budget,
                    const RunRow* reference) {
  if (!r.error.empty()) {
    ctx.print(cell("  %-36s %-10s fails: %s\n", r.name.c_str(), budget.c_str(), r.error.c_str()));
    return;
  }
  std::string vs = "reference";
  if (reference) {
    vs = reference->error.empty() ? cell("%.2fx", r.tokens_per_s / reference->tokens_per_s)
                                  : "(the default failed)";
  }
  ctx.print(cell("  %-36s %-10s %3lld x %-3lld %-9s %4lld %10.0f   %s\n", r.name.c_str(),
                budget.c_str(), static_cast<long long>(r.micro_batch),
                static_cast<long long>(r.accumulation), r.recompute ? "blocks" : "off",
                static_cast<long long>(r.oom_recoveries), r.tokens_per_s, vs.c_str()));
}

json auto_table(BenchContext& ctx, const BatchArgs& a) {
  const std::string roomy = "2GiB";
  const double margin = bench_config(a, 32, {}).batch().memory_margin();
  ctx.print(cell(
      "\n# 2. batch.micro_batch = auto beside the default (4): global batch 32, 1 warm-up + %d "
      "timed steps; auto leaves batch.memory_margin = %.2f of the budget free and takes at most a "
      "rank's share; b x k = rank 0's at the end; oom = out-of-memory recoveries; after a cut, b "
      "rises again only with 5 %% of the budget to spare beyond the margin (hysteresis)\n"
      "#   configuration                        budget       b x k   recompute  oom   "
      "tokens/s   vs default at %s\n",
      a.steps, margin, roomy.c_str()));
  const auto budget = [](const std::string& b) { return "runtime.memory_budget=" + b; };
  const auto timed = [&](const std::string& name, const std::string& b, bool automatic,
                         const std::string& cut = "") {
    std::vector<std::string> set{budget(b)};
    if (automatic) set.push_back("batch.micro_batch=auto");
    return measure_run(ctx, a, name, set, cut.empty() ? "" : "ETR_TEST_BUDGET_CUT=" + cut);
  };
  json rows = json::array();
  const RunRow def = timed("default (micro_batch 4)", roomy, false);
  const RunRow aut = timed("auto", roomy, true);
  print_auto_row(ctx, def, roomy, nullptr);
  print_auto_row(ctx, aut, roomy, &def);
  rows.push_back(def);
  rows.push_back(aut);
  const size_t tight = tight_budget(aut, margin);
  if (tight == 0) {
    ctx.print(
        "# no tight budget: the memory model of the auto row is missing or b = 2 does not fit "
        "below b = 4\n");
    return {{"budget", roomy}, {"rows", rows}};
  }
  const std::string t = format_bytes(static_cast<double>(tight)),
                    bytes = num(static_cast<int64_t>(tight));
  const std::string cut = "2:" + bytes;
  const RunRow tdef = timed("default (micro_batch 4)", bytes, false);
  const RunRow taut = timed("auto", bytes, true);
  const RunRow tcut = timed("default, cut to " + t + " in step 2", roomy, false, cut);
  print_auto_row(ctx, tdef, t, &def);
  print_auto_row(ctx, taut, t, &def);
  print_auto_row(ctx, tcut, roomy, &def);
  ctx.print(
      cell("# tight budget %s: midway between the model's peak at b = 2 over (1 - margin), %s, "
          "and at b = 4, %s; the cut (ETR_TEST_BUDGET_CUT=%s) lands inside the first timed step\n",
          t.c_str(), format_bytes(aut.model_peaks[1] / (1 - margin)).c_str(),
          format_bytes(aut.model_peaks[3]).c_str(), cut.c_str()));
  for (const RunRow* r : {&tdef, &taut, &tcut}) rows.push_back(*r);
  return {{"budget", roomy}, {"tight_budget", tight}, {"rows", rows}};
}

json shares_table(BenchContext& ctx, const BatchArgs& a) {
  ctx.print(
      cell("\n# 3. unequal workers: rank 1 at half speed (ETR_SLOW_RANK=1:2), global batch 32, "
          "micro-batch 2; %d warm-up steps (the balancer observes 2, then re-balances) + %d timed; "
          "shares = samples per rank at the end\n"
          "#   configuration                      step s   tokens/s  shares      re-balances\n",
          a.warmup, a.steps));
  if (ctx.size() < 2) {
    ctx.print("# skipped: needs at least 2 ranks\n");
    return json::object();
  }
  const std::vector<std::string> eq{"batch.micro_batch=2", "batch.shares=equal"};
  const std::vector<std::string> tp{"batch.micro_batch=2", "batch.shares=throughput"};
  const auto timed = [&](const std::string& name, const std::vector<std::string>& set, bool slow) {
    return measure_run(ctx, a, name, set, slow ? "ETR_SLOW_RANK=1:2" : "", a.warmup);
  };
  const RunRow rows[3] = {timed("equal shares, rank 1 slow", eq, true),
                          timed("throughput shares, rank 1 slow", tp, true),
                          timed("equal shares, no slow rank", eq, false)};
  json out = json::array();
  for (const RunRow& r : rows) {
    ctx.print(!r.error.empty()
                  ? cell("  %-34s fails: %s\n", r.name.c_str(), r.error.c_str())
                  : cell("  %-34s %7.3f %10.0f  %-11s %lld\n", r.name.c_str(), r.step_seconds,
                        r.tokens_per_s, joined(r.shares, false).c_str(),
                        static_cast<long long>(r.share_rebalances)));
    out.push_back(r);
  }
  double speedup = 0;
  if (rows[0].error.empty() && rows[1].error.empty())
    speedup = rows[0].step_seconds / rows[1].step_seconds;
  ctx.print(
      cell("# throughput shares %.2fx the equal shares' speed with rank 1 slow (bar: >= 1.20x; "
          "theory for speeds 1 and 1/2: 1.50x)%s\n",
          speedup, speedup >= 1.2 ? "" : "  BELOW THE BAR"));
  return {{"rows", out}, {"speedup", speedup}};
}


// The 1-minute load average (/proc/loadavg; -1 when unreadable): the timed rows (auto,
// shares) want the ranks' cores otherwise idle.
double load_average() {
  double load = -1;
  std::ifstream("/proc/loadavg") >> load;
  return load;
}

void run(BenchContext& ctx, const BatchArgs& a) {
  const TrainConfig c = bench_config(a, 16, {});
  ctx.print(
      cell("# etr-bench batch: GPT-2 n_layer=%d d_model=%d seq_len=%d (preset small), %d ranks, "
          "%d thread per rank\n# %s; load average %.2f on %d CPUs at the start\n",
          c.model().n_layer(), c.model().d_model(), c.model().seq_len(), ctx.size(),
          c.runtime().threads(), ctx.machine().placement().c_str(), load_average(),
          ctx.machine().cpus_online));
  Logger& log = ctx.world().log();
  const LogLevel level = log.level();
  log.set_level(LogLevel::kWarn);
  json doc{{"benchmark", "batch"}, {"machine", ctx.machine().to_json()}, {"steps", a.steps}};
  if (a.wants("memory")) doc["memory"] = memory_table(ctx, a);
  if (a.wants("auto")) doc["auto"] = auto_table(ctx, a);
  if (a.wants("shares")) doc["shares"] = shares_table(ctx, a);
  if (a.wants("noise")) doc["noise"] = noise_table(ctx, a.noise_steps);
  log.set_level(level);
  ctx.print(cell("# load average %.2f at the end\n", load_average()));
  if (!a.json.empty()) ctx.write_json(a.json, doc);
}

}  // namespace

void add_batch_subcommand(CLI::App& app, SubcommandList& list) {
  auto args = std::make_shared<BatchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "batch",
      "Batch policy: memory model vs measured peak, auto micro-batch, throughput shares, "
      "noise scale (bench/run_batch.sh)");
  const std::tuple<const char*, int*, const char*> counts[] = {
      {"--steps", &args->steps, "Timed optimizer steps per row (auto, shares)"},
      {"--warmup", &args->warmup, "Untimed steps first (shares; auto takes 1)"},
      {"--memory-steps", &args->memory_steps, "Steps per memory row"},
      {"--noise-steps", &args->noise_steps, "Simulated steps per noise estimate"}};
  for (auto [name, value, help] : counts) {
    cmd->add_option(name, *value, help)
        ->capture_default_str()
        ->check(CLI::Range(value == &args->warmup ? 0 : 1, 1000000));
  }
  cmd->add_option("--only", args->only, "Tables to run: memory, auto, shares, noise")
      ->delimiter(',')
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kTables), std::end(kTables))))
      ->capture_default_str();
  add_training_config_options(cmd, args->config, args->overrides, args->json);
  list.push_back({cmd, [args](BenchContext& ctx) { run(ctx, *args); }});
}

}  // namespace etr::bench
