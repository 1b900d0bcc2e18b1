#include "bench/elastic_bench.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_context.h"
#include "bench/elastic_session.h"
#include "bench/table.h"
#include "examples/gpt/gpt_config.h"
#include "runtime/config/train_config.h"
#include "runtime/elastic.h"
#include "runtime/error.h"
#include "examples/gpt/model_presets.h"

namespace etr::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int64_t kSteadyFrom = 3;  // the steady window starts after this step (warm-up)
const double kNone = std::nan("");  // a part that does not apply to a row

struct ElasticArgs {
  std::string etr_run, etr_train, config, dir = ".", json;
  std::string cluster;  // --cluster: tests/cluster/sim_cluster.sh ("": this machine)
  std::vector<std::string> overrides;
  int rounds = 3, np = 2, checkpoint_every = 10;
  double timeout_s = 60;
  bool keep = false;
};

// What the bench adds to the job's config: a schedule that outlasts the rounds, the
// checkpoint interval, and quiet logs; then the user's --set.
std::vector<std::string> job_overrides(const ElasticArgs& a) {
  std::vector<std::string> s = {"schedule.max_steps=100000000",
                                "checkpoint.every=" + std::to_string(a.checkpoint_every),
                                "log.log_every=100",
                                "log.sample_tokens=0",
                                "log.metrics_file=",
                                "log.eval_every=0"};
  s.insert(s.end(), a.overrides.begin(), a.overrides.end());
  return s;
}

// One start or recovery, in ms; kNone where a part does not apply.
struct Phase {
  double detect = kNone, agree_save = kNone, exit = kNone, relaunch = kNone, restore = kNone,
         first_step = kNone, total = kNone;
  int64_t steps_lost = -1;  // -1: does not apply
};

struct Round {
  Phase cold, steady, kill, join, leave;  // steady: total = ms/step at np
  Phase lost, back;  // --cluster: the last host lost, and back (instead of join, leave)
};

// The first launch: from etr-run's launch line to its first step ("relaunch" is the
// launch, "restore" building the model with nothing to restore).
Phase cold_start(const Launch& l) {
  Phase p;
  p.relaunch = static_cast<double>(l.ms("started") - l.ms("launch"));
  p.restore = static_cast<double>(l.ms("ready") - l.ms("started"));
  p.first_step = static_cast<double>(l.ms("first-step") - l.ms("ready"));
  p.total = static_cast<double>(l.ms("first-step") - l.ms("launch"));
  return p;
}

// From `trigger_ms` (the kill, or the slots file rewritten) to the first step of `after`,
// the launch that followed `before`. The parts add up to the total.
Phase recovery(const Launch& before, const Launch& after, int64_t trigger_ms, bool resize) {
  Phase p;
  const int64_t exit = before.ms("exit");
  if (resize) {
    if (before.field("resize-exit", "saved") != 1) throw Error("the resize's save failed");
    p.detect = static_cast<double>(before.ms("resize-request") - trigger_ms);
    p.agree_save = static_cast<double>(before.ms("resize-exit") - before.ms("resize-request"));
    p.exit = static_cast<double>(exit - before.ms("resize-exit"));
  } else {
    p.detect = static_cast<double>(exit - trigger_ms);
  }
  p.relaunch = static_cast<double>(after.ms("started") - exit);
  p.restore = static_cast<double>(after.ms("ready") - after.ms("started"));
  p.first_step = static_cast<double>(after.ms("first-step") - after.ms("ready"));
  p.total = static_cast<double>(after.ms("first-step") - trigger_ms);
  p.steps_lost = before.field("exit", "last_step") - after.field("restored", "step");
  return p;
}

void expect_launch(const Launch& l, int np, const std::string& reason) {
  const auto& f = l.at("launch").fields;
  if (f.at("np") != std::to_string(np) || f.at("reason") != reason) {
    throw Error("etr-run's launch " + f.at("n") + " is np=" + f.at("np") + " reason=" +
                f.at("reason") + "; expected np=" + std::to_string(np) + " reason=" + reason);
  }
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// --cluster: the last host lost midway between checkpoints (the job goes on without it),
// then back (the job grows onto it), after the kill's relaunch (launch 2).
void measure_host_loss(const ElasticArgs& a, ElasticSession& s, Round& r) {
  std::vector<Launch> l = s.launches();
  const int every = a.checkpoint_every;
  int64_t at = l[1].field("first-step", "step") + 2;
  while (at % every != every / 2) ++at;
  s.wait_step(at);
  const int64_t lost_ms = s.lose_host(a.np);
  l = s.wait_first_step(3, "the first step after host " + std::to_string(a.np) + " was lost");
  expect_launch(l[2], a.np - 1, "failure");
  r.lost = recovery(l[1], l[2], lost_ms, false);
  s.wait_step(l[2].field("first-step", "step") + 2);
  const int64_t back_ms = s.restore_host(a.np);
  l = s.wait_first_step(4, "the first step after host " + std::to_string(a.np) + " came back");
  expect_launch(l[3], a.np, "resize");
  r.back = recovery(l[2], l[3], back_ms, true);
}

Round measure_round(const ElasticArgs& a, const fs::path& dir) {
  ElasticSession s({a.etr_run, a.etr_train, a.config, job_overrides(a), a.np, a.timeout_s,
                    a.cluster},
                   dir);
  const int every = a.checkpoint_every;
  Round r;
  std::vector<Launch> l = s.wait_first_step(1, "the first step of the first launch");
  r.cold = cold_start(l[0]);

  // Steady state: whole steps between two polls of the progress file.
  const int64_t from = s.wait_step(kSteadyFrom);
  const auto t0 = Clock::now();
  const int64_t to = s.wait_step(from + every);
  r.steady.total = ms_since(t0) / static_cast<double>(to - from);

  // kill -9 of the last rank right after the step midway between two checkpoints.
  const pid_t victim = s.rank_pid(a.np - 1);
  int64_t kill_at = to + 1;
  while (kill_at % every != every / 2) ++kill_at;
  s.wait_step(kill_at);
  const int64_t kill_ms = unix_ms();
  if (::kill(victim, SIGKILL) != 0)
    throw Error("kill -9 of rank " + std::to_string(a.np - 1) + " failed");
  l = s.wait_first_step(2, "the first step after the kill");
  expect_launch(l[1], a.np, "failure");
  r.kill = recovery(l[0], l[1], kill_ms, false);

  if (!a.cluster.empty()) {
    measure_host_loss(a, s, r);
    s.stop();
    return r;
  }
  // Join one slot, then leave it again, each after a few steps at the current size.
  s.wait_step(l[1].field("first-step", "step") + 2);
  const int64_t join_ms = s.set_slots(a.np + 1);
  l = s.wait_first_step(3, "the first step at np " + std::to_string(a.np + 1));
  expect_launch(l[2], a.np + 1, "resize");
  r.join = recovery(l[1], l[2], join_ms, true);
  s.wait_step(l[2].field("first-step", "step") + 2);
  const int64_t leave_ms = s.set_slots(a.np);
  l = s.wait_first_step(4, "the first step back at np " + std::to_string(a.np));
  expect_launch(l[3], a.np, "resize");
  r.leave = recovery(l[2], l[3], leave_ms, true);
  s.stop();
  return r;
}

// --- Output ---

// Median over rounds of one part of one row; "-" where it does not apply.
std::string median_cell(const std::vector<Round>& rounds, Phase Round::*row, double Phase::*part) {
  std::vector<double> v;
  for (const Round& r : rounds)
    if (!std::isnan(r.*row.*part)) v.push_back(r.*row.*part);
  return v.empty() ? "-" : cell("%.0f", median(v));
}

// Median over rounds of the row's total relative to the same round's `ref` total.
double median_ratio(const std::vector<Round>& rounds, Phase Round::*row, Phase Round::*ref) {
  std::vector<double> v;
  for (const Round& r : rounds) v.push_back((r.*row).total / (r.*ref).total);
  return median(v);
}

std::string steps_lost_cell(const std::vector<Round>& rounds, Phase Round::*row) {
  int64_t lo = INT64_MAX, hi = -1;
  for (const Round& r : rounds) {
    lo = std::min(lo, (r.*row).steps_lost);
    hi = std::max(hi, (r.*row).steps_lost);
  }
  if (hi < 0) return "-";
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
}

struct RowSpec {
  std::string what;
  int np;
  Phase Round::*phase;
  const char* key;  // in the JSON
};

nlohmann::json print_table(const BenchContext& ctx, const ElasticArgs& a,
                           const std::vector<Round>& rounds) {
  const std::string np = std::to_string(a.np), np1 = std::to_string(a.np + 1);
  std::vector<RowSpec> rows = {
      {"cold start (reference)", a.np, &Round::cold, "cold_start"},
      {"steady step (reference)", a.np, &Round::steady, "steady_step"},
      {"kill -9 rank " + std::to_string(a.np - 1), a.np, &Round::kill, "kill"},
  };
  if (a.cluster.empty()) {
    rows.push_back({"join np " + np + " -> " + np1, a.np + 1, &Round::join, "join"});
    rows.push_back({"leave np " + np1 + " -> " + np, a.np, &Round::leave, "leave"});
  } else {
    rows.push_back({"host " + np + " lost", a.np - 1, &Round::lost, "host_lost"});
    rows.push_back({"host " + np + " back", a.np, &Round::back, "host_back"});
  }
  struct Part {
    const char* title;
    const char* key;  // in the JSON
    double Phase::*ms;
  };
  const Part parts[] = {{"detect", "detect_ms", &Phase::detect},
                        {"agree+save", "agree_save_ms", &Phase::agree_save},
                        {"exit", "exit_ms", &Phase::exit},
                        {"relaunch", "relaunch_ms", &Phase::relaunch},
                        {"restore", "restore_ms", &Phase::restore},
                        {"first step", "first_step_ms", &Phase::first_step},
                        {"total", "total_ms", &Phase::total}};
  Table t;
  const std::string group = "ms, median of " + std::to_string(rounds.size()) +
                            (rounds.size() == 1 ? " round" : " rounds");
  t.add_column("what                   ", 23).add_column("np", 2);
  for (const Part& part : parts) t.add_column(part.title, 6, group);
  t.add_column("best total", 10).add_column("x cold start", 12).add_column("in steps", 8);
  t.add_column("steps lost", 10);
  ctx.print(t.header());
  nlohmann::json out;
  for (const RowSpec& row : rows) {
    std::vector<std::string> cells = {cell("%-23s", row.what.c_str()), std::to_string(row.np)};
    for (const Part& part : parts) cells.push_back(median_cell(rounds, row.phase, part.ms));
    double best = INFINITY;
    nlohmann::json per_round = nlohmann::json::array();
    for (const Round& r : rounds) {
      const Phase& p = r.*row.phase;
      best = std::min(best, p.total);
      nlohmann::json j = {{"steps_lost", p.steps_lost}};
      for (const Part& part : parts)
        if (!std::isnan(p.*part.ms)) j[part.key] = p.*part.ms;
      per_round.push_back(j);
    }
    cells.push_back(cell("%.0f", best));
    cells.push_back(cell("%.2f", median_ratio(rounds, row.phase, &Round::cold)));
    cells.push_back(cell("%.1f", median_ratio(rounds, row.phase, &Round::steady)));
    cells.push_back(steps_lost_cell(rounds, row.phase));
    ctx.print(t.row(cells));
    out[row.key] = per_round;
  }
  return out;
}

void print_header(const BenchContext& ctx, const ElasticArgs& a, const TrainConfig& c) {
  const gpt::GptConfig g = gpt::GptConfig::from(c.model());
  const double params = static_cast<double>(g.num_parameters());
  const int cpus = ctx.machine().cpus_online;
  std::string text = "# etr-bench elastic: " + a.config + ": " + g.str();
  text += cell(
      ", global batch %d (micro-batch %d); checkpoint %.1f MB (param + adam.m + "
      "adam.v, f32) every %d steps, %s\n",
      c.batch().global_batch(), c.batch().micro_batch(), 3 * 4 * params / 1e6, a.checkpoint_every,
      c.checkpoint().async() ? "async" : "sync");
  if (a.cluster.empty()) {
    text += cell(
        "# etr-run on localhost:%d: kill -9 of one rank, join to %d slots, leave back to "
        "%d; discovery every %s s; %d round(s), each a fresh etr-run session; %d CPUs",
        a.np, a.np + 1, a.np, ElasticSession::kDiscoveryInterval, a.rounds, cpus);
    if (cpus < a.np + 1) text += " (np " + std::to_string(a.np + 1) + " oversubscribes them)";
  } else {
    text += cell(
        "# etr-run on %d simulated hosts of 1 slot (%s, 2 Gbit/s links%s): kill -9 of one "
        "rank, host %d lost (its processes killed, its link cut, dropped by discovery) and "
        "back; discovery every %s s; %d round(s), each a fresh etr-run session",
        a.np, a.cluster.c_str(), a.np <= cpus ? ", a CPU each" : ", sharing the CPUs", a.np,
        ElasticSession::kDiscoveryInterval, a.rounds);
  }
  ctx.print(text + "\n");
}

void print_notes(const BenchContext& ctx, const ElasticArgs& a, const std::vector<Round>& r) {
  std::vector<double> lost_ms;
  for (const Round& x : r)
    lost_ms.push_back(static_cast<double>(x.kill.steps_lost) * x.steady.total);
  std::string text =
      "# detect: kill -9 (a host lost: its processes killed) -> etr-run saw mpirun exit; "
      "join/leave (a host back): slots file rewritten -> etr-run asked the job to resize. "
      "agree+save: -> the ranks stopped at a step boundary and saved "
      "(resize-exit); exit: -> mpirun exited\n"
      "# relaunch: -> the new ranks started (MPI initialised); restore: -> model built and "
      "checkpoint read (cold start: built, nothing to read); first step: -> the first step done. "
      "Cold start: the same from etr-run's launch\n"
      "# x cold start, in steps: median of each round's total / that round's cold start, "
      "steady step\n";
  text += cell(
      "# steps lost: the last step done - the step resumed from; the kill comes "
      "midway between checkpoints (every %d): redoing the lost steps costs %.0f ms "
      "more (median), not in total\n",
      a.checkpoint_every, median(lost_ms));
  ctx.print(text);
}

// --- The subcommand ---

// Where etr-run or etr-train is by default: in the build tree, `build_dir` beside
// etr-bench's bench/; installed, in etr-bench's own directory. "" when neither.
std::string find_program(const std::string& build_dir, const std::string& name) {
  std::error_code ec;
  const fs::path here = fs::read_symlink("/proc/self/exe", ec).parent_path();
  if (ec) return "";
  for (const fs::path& p : {here / ".." / build_dir / name, here / name}) {
    if (::access(p.c_str(), X_OK) == 0) return fs::weakly_canonical(p, ec).string();
  }
  return "";
}

void resolve_paths(ElasticArgs& a) {
  if (a.etr_run.empty()) a.etr_run = find_program("launcher", "etr-run");
  if (a.etr_train.empty()) a.etr_train = find_program("examples/train", "etr-train");
  for (const auto& [path, flag] :
       {std::pair{a.etr_run, "--etr-run"}, {a.etr_train, "--etr-train"}}) {
    if (path.empty() || ::access(path.c_str(), X_OK) != 0) {
      throw ConfigError(std::string(path.empty() ? "cannot find the program beside etr-bench"
                                                 : "cannot run " + path) +
                        "; build it (ninja etr-run etr-train) or pass " + flag);
    }
  }
  if (a.config.empty()) a.config = std::string(ETR_SOURCE_DIR) + "/configs/demo.pbtxt";
  if (!fs::exists(a.config)) throw ConfigError("no config " + a.config + "; pass --config");
  std::error_code ec;
  a.etr_run = fs::absolute(a.etr_run, ec).string();
  a.etr_train = fs::absolute(a.etr_train, ec).string();
  a.config = fs::absolute(a.config, ec).string();
}

// --cluster: a simulated cluster of np hosts of 1 slot for the whole run (a CPU each when
// there are enough), named after this process, removed at the end.
struct SimulatedCluster {
  std::string script;
  SimulatedCluster(const std::string& sim, int hosts, int cpus) : script(sim) {
    if (script.empty()) return;
    ::setenv("ETR_CLUSTER_NAME", ("etrbe" + std::to_string(::getpid())).c_str(), 1);
    const std::string pin = hosts <= cpus ? "ETR_CLUSTER_PIN=1 " : "";
    const std::string up = pin + "'" + script + "' up " + std::to_string(hosts) + " 1 2gbit >/dev/null";
    if (std::system(up.c_str()) != 0) {
      throw ConfigError("cannot make the simulated cluster ('" + script + " up' failed; it needs "
                        "root and network namespaces: '" + script + " check' says why)");
    }
  }
  ~SimulatedCluster() {
    if (!script.empty()) std::system(("'" + script + "' down").c_str());
  }
};

// The run's directory inside --dir, removed at the end unless kept (with --dir itself
// when this run made it and it is empty).
struct WorkDir {
  fs::path path;
  bool keep = false, made_parent = false;
  ~WorkDir() {
    std::error_code ec;
    if (keep) return;
    fs::remove_all(path, ec);
    if (made_parent) fs::remove(path.parent_path(), ec);
  }
};

void run(BenchContext& ctx, ElasticArgs a) {
  if (ctx.size() > 1) {
    throw ConfigError(
        "etr-bench elastic runs on one rank and starts etr-run itself: run it "
        "without mpirun, or with -np 1");
  }
  resolve_paths(a);
  TrainConfig config = load_config(a.config);
  apply_overrides(config, job_overrides(a));
  resolve(config, gpt::model_presets());
  WorkDir work{fs::absolute(a.dir) / ("etr-bench-elastic-" + std::to_string(::getpid())), a.keep};
  std::error_code ec;
  work.made_parent = !fs::exists(a.dir, ec);
  fs::create_directories(work.path, ec);
  if (ec) throw IoError("cannot create " + work.path.string() + ": " + ec.message());
  if (!a.cluster.empty()) a.cluster = fs::absolute(a.cluster, ec).string();
  const SimulatedCluster cluster(a.cluster, a.np, ctx.machine().cpus_online);
  print_header(ctx, a, config);
  const InterruptGuard interrupts;

  std::vector<Round> rounds;
  for (int i = 1; i <= a.rounds; ++i) {
    const fs::path dir = work.path / ("round-" + std::to_string(i));
    try {
      fs::create_directory(dir);
      rounds.push_back(measure_round(a, dir));
    } catch (const std::exception& e) {
      work.keep = true;
      throw AgreedError("round " + std::to_string(i) + ": " + e.what() + "; etr-run's output (" +
                        (dir / "etr-run.log").string() + ") and the events (" +
                        (dir / "run" / "events").string() + ") are kept");
    }
    const Round& r = rounds.back();
    const bool hosts = !a.cluster.empty();
    ctx.print(cell("# round %d of %d: cold start %.0f ms, step %.1f ms, kill -9 %.0f ms (%lld "
                   "steps lost), %s %.0f ms, %s %.0f ms\n",
                   i, a.rounds, r.cold.total, r.steady.total, r.kill.total,
                   static_cast<long long>(r.kill.steps_lost), hosts ? "host lost" : "join",
                   hosts ? r.lost.total : r.join.total, hosts ? "host back" : "leave",
                   hosts ? r.back.total : r.leave.total));
  }
  nlohmann::json rows = print_table(ctx, a, rounds);
  print_notes(ctx, a, rounds);
  if (a.keep)
    ctx.print("# kept " + work.path.string() + " (each round's events and etr-run's output)\n");
  if (!a.json.empty()) {
    ctx.write_json(a.json, {{"benchmark", "elastic"},
                            {"config", format_config(config)},
                            {"machine", ctx.machine().to_json()},
                            {"np", a.np},
                            {"checkpoint_every", a.checkpoint_every},
                            {"discovery_interval_s", std::stod(ElasticSession::kDiscoveryInterval)},
                            {"rows", rows}});
  }
}

}  // namespace

void add_elastic_subcommand(CLI::App& app, SubcommandList& list) {
  auto args = std::make_shared<ElasticArgs>();
  CLI::App* cmd = app.add_subcommand(
      "elastic",
      "Recovery from kill -9 and resizing under etr-run beside a cold start and a step "
      "(one rank, no mpirun: bench/run_elastic.sh)");
  cmd->add_option("--etr-run", args->etr_run,
                  "etr-run (default: the one built or installed with etr-bench)");
  cmd->add_option("--etr-train", args->etr_train, "etr-train (default: as --etr-run)");
  cmd->add_option("--config", args->config,
                  "The job's config (default: the source tree's configs/demo.pbtxt)");
  cmd->add_option("--set", args->overrides, "Override a field of the job's config (repeatable)");
  cmd->add_option("--rounds", args->rounds, "Rounds, each a fresh etr-run session")
      ->capture_default_str();
  cmd->add_option("--np", args->np, "Ranks of the job; it joins to np + 1 and leaves back")
      ->capture_default_str();
  cmd->add_option("--checkpoint-every", args->checkpoint_every,
                  "The job's checkpoint interval in steps")
      ->capture_default_str();
  cmd->add_option("--timeout", args->timeout_s,
                  "Seconds any one wait may take before the bench gives up")
      ->capture_default_str();
  cmd->add_option(
         "--dir", args->dir,
         "Directory for the run's files; the run works in a new subdirectory of it and removes it")
      ->capture_default_str();
  cmd->add_flag("--keep", args->keep,
                "Keep the run's subdirectory (each round's events and etr-run's output)");
  cmd->add_option("--cluster", args->cluster,
                  "Run on simulated hosts made with this tests/cluster/sim_cluster.sh (as root): "
                  "np hosts of 1 slot; the rows after the kill are the last host lost and back "
                  "instead of a join and a leave (bench/run_cluster.sh elastic)");
  cmd->add_option("--json", args->json, "Also write the figures to this JSON file");
  list.push_back({cmd, [args](BenchContext& ctx) {
                    if (args->rounds < 1 || args->np < 1 || args->checkpoint_every < 2 ||
                        !(args->timeout_s > 0)) {
                      throw ConfigError(
                          "--rounds and --np must be at least 1, --checkpoint-every "
                          "at least 2 and --timeout positive");
                    }
                    if (!args->cluster.empty() && args->np < 2) {
                      throw ConfigError("--cluster needs --np 2 or more (a host is lost)");
                    }
                    run(ctx, *args);
                  }});
}

}  // namespace etr::bench
