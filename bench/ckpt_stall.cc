#include "bench/ckpt_stall.h"

#include <chrono>
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bench/table.h"
#include "parallel/memory_cadence.h"

namespace etr::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Mode {
  const char* key;   // --modes
  const char* name;
  train::Trainer* trainer;
  bool saves;
  const char* tier;  // what save_checkpoint() is given
  MemoryCadence* cadence = nullptr;  // the bounded mode: saves when due, not every k
  int64_t step = 0;                  // its steps so far (the cadence's step numbers)
  size_t seen = 0;                   // its writer's saves the cadence has seen
  std::vector<int> saves_in;     // per round: saves in the window
  std::vector<double> seconds;   // per round: the timed window, the slowest rank's
  std::vector<double> cpu;       // per round: the process's CPU time in it (all threads)
  std::vector<double> in_save;   // every timed save() call, the slowest rank's
  std::vector<double> stall;     // every save: the writer's stall (rank 0's): save() and
                                 // waiting for the snapshot copy
  std::vector<double> commit;    // every save: rank 0's time in its commit
  std::vector<double> peer_wait; // every save: rank 0's wait for the others in both
};

// The bounded mode, after each step: a newly committed save's cost to training (as
// CheckpointCadence measures it) and the step time, the largest over the ranks, to its
// cadence. Collective: saves commit on every rank at the same step.
void observe_saves(const BenchContext& ctx, Mode& m, const CheckpointWriter& writer) {
  if (writer.stats().size() == m.seen) return;
  m.seen = writer.stats().size();
  double v[2] = {writer.training_cost(writer.stats().back()), m.cadence->step_seconds()};
  ctx.max_over_ranks(v, 2);
  const std::string change = m.cadence->observe(v[0], v[1]);
  if (!change.empty()) ctx.print("# bounded memory tier: " + change + "\n");
}

// One timed window of `o.steps` steps of mode `m` (see ckpt_stall.h for the steady state).
void window(const BenchContext& ctx, Mode& m, const CkptStallOptions& o) {
  train::Trainer& t = *m.trainer;
  const bool memory = std::string(m.tier) == "memory";
  const CheckpointWriter& writer = memory ? *t.memory_checkpoint_writer() : *t.checkpoint_writer();
  const size_t first = writer.stats().size();
  if (m.saves) {
    t.train_step();  // untimed: this step's save must not be the previous window's last one
    t.save_checkpoint(m.tier);
    if (m.cadence) m.cadence->saved(++m.step);
  }
  m.seen = writer.stats().size();  // (the bounded mode shares the memory tier's trainer)
  std::vector<double> in_save;
  ctx.sleeping_barrier();
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  int saves = 0;
  for (int i = 1; i <= o.steps; ++i) {
    const auto s0 = Clock::now();
    t.train_step();
    ++m.step;
    if (m.saves && (m.cadence ? m.cadence->due(m.step) : i % o.every == 0)) {
      const auto c0 = Clock::now();
      t.save_checkpoint(m.tier);
      in_save.push_back(seconds_since(c0));
      ++saves;
      if (m.cadence) m.cadence->saved(m.step);
    }
    if (m.cadence) {
      m.cadence->step_ended(seconds_since(s0));
      observe_saves(ctx, m, writer);
    }
  }
  ctx.sleeping_barrier();
  double times[2] = {seconds_since(t0), process_cpu_seconds() - cpu0};
  ctx.max_over_ranks(times, 2);
  m.seconds.push_back(times[0]);
  m.cpu.push_back(times[1]);
  m.saves_in.push_back(saves);
  if (!m.saves) return;
  t.flush_checkpoints();
  if (!in_save.empty()) ctx.max_over_ranks(in_save.data(), static_cast<int>(in_save.size()));
  m.in_save.insert(m.in_save.end(), in_save.begin(), in_save.end());
  const std::vector<SaveStats>& stats = writer.stats();
  for (size_t i = first; i < stats.size(); ++i) {
    if (!stats[i].ok) throw AgreedError("checkpoint save failed in training: " + stats[i].error);
    m.stall.push_back(stats[i].stall_seconds);
    m.commit.push_back(stats[i].commit_seconds);
    m.peer_wait.push_back(stats[i].peer_wait_seconds);
  }
}

// The table, one row a mode, and its JSON.
nlohmann::json print_rows(const BenchContext& ctx, const std::vector<Mode>& modes,
                          const CkptStallOptions& o) {
  Table t;
  t.add_column("mode                      ", 26).add_column("ranks", 5).add_column("ms/step best", 12);
  t.add_column("ms/step median", 14).add_column("CPU ms/step", 11).add_column("ms in save()", 12);
  t.add_column("saves", 5).add_column("stall/save ms", 13).add_column("% of a step", 11);
  t.add_column("stall/step", 10);
  ctx.print(t.header());
  const double step_ms = median(modes[0].seconds) / o.steps * 1e3;
  nlohmann::json out = nlohmann::json::array();
  for (const Mode& m : modes) {
    std::vector<double> stall_ms, step_stall_ms, saves;  // per round
    for (size_t r = 0; r < m.seconds.size(); ++r) {
      const double extra = (m.seconds[r] - modes[0].seconds[r]) * 1e3;
      saves.push_back(m.saves_in[r]);
      stall_ms.push_back(m.saves_in[r] > 0 ? extra / m.saves_in[r] : 0.0);
      step_stall_ms.push_back(extra / o.steps);
    }
    const double stall = median(stall_ms);
    std::vector<double> per_step = m.seconds;
    for (double& s : per_step) s = s / o.steps * 1e3;
    char name[64];
    if (!m.saves) {
      std::snprintf(name, sizeof name, "%s", m.name);
    } else if (m.cadence) {
      std::snprintf(name, sizeof name, "%s %g%%", m.name, 100 * o.max_stall);
    } else {
      std::snprintf(name, sizeof name, "%s every %d", m.name, o.every);
    }
    ctx.print(t.row({cell("%-26s", name), cell("%d", ctx.size()),
                     cell("%.1f", *std::min_element(per_step.begin(), per_step.end())),
                     cell("%.1f", median(per_step)), cell("%.1f", median(m.cpu) / o.steps * 1e3),
                     m.saves ? cell("%.1f", median(m.in_save) * 1e3) : "-",
                     m.saves ? cell("%.1f", median(saves)) : "-", m.saves ? cell("%.1f", stall) : "-",
                     m.saves ? cell("%.1f%%", 100 * stall / step_ms) : "-",
                     m.saves ? cell("%.2f%%", 100 * median(step_stall_ms) / step_ms) : "-"}));
    out.push_back({{"mode", name},
                   {"ranks", ctx.size()},
                   {"round_seconds", m.seconds},
                   {"round_cpu_seconds", m.cpu},
                   {"steps", o.steps},
                   {"saves_per_round", m.saves_in},
                   {"stall_ms_per_save", m.saves ? stall : 0.0},
                   {"stall_ms_per_step", m.saves ? median(step_stall_ms) : 0.0},
                   {"in_save_seconds", m.in_save},
                   {"writer_stall_seconds", m.stall}});
  }
  return out;
}

Mode make_mode(const char* key, const char* name, train::Trainer& t, bool saves,
               const char* tier, MemoryCadence* cadence = nullptr) {
  Mode m{};
  m.key = key;
  m.name = name;
  m.trainer = &t;
  m.saves = saves;
  m.tier = tier;
  m.cadence = cadence;
  return m;
}

// "no saving" first (the baseline), then the modes `keys` names (comma-separated; "all").
std::vector<Mode> selected_modes(const StallTrainers& t, MemoryCadence& bounded,
                                 const std::string& keys) {
  std::vector<Mode> all = {
      make_mode("none", "no saving", t.async_spare, false, "durable"),
      make_mode("async", "async save", t.async_spare, true, "durable"),
      make_mode("async-rank", "async, rank cores", t.async_rank, true, "durable"),
      make_mode("sync", "sync save", t.sync, true, "durable"),
      make_mode("memory", "memory tier", t.memory, true, "memory"),
      make_mode("bounded", "memory tier, bounded", t.memory, true, "memory", &bounded)};
  if (keys == "all") return all;
  std::vector<std::string> wanted;
  std::stringstream list(keys);
  for (std::string key; std::getline(list, key, ',');) wanted.push_back(key);
  std::vector<Mode> modes = {all[0]};
  for (size_t i = 1; i < all.size(); ++i) {
    if (std::find(wanted.begin(), wanted.end(), all[i].key) != wanted.end()) modes.push_back(all[i]);
  }
  return modes;
}

const Mode* find_mode(const std::vector<Mode>& modes, const char* key) {
  for (const Mode& m : modes) {
    if (std::string(m.key) == key) return &m;
  }
  return nullptr;
}

// The lines under the table, for the modes that ran.
void print_notes(const BenchContext& ctx, const std::vector<Mode>& modes,
                 const StallTrainers& trainers, const CkptStallOptions& o) {
  char buf[1024];
  const Mode* async = find_mode(modes, "async");
  const Mode* async_rank = find_mode(modes, "async-rank");
  if (async && async_rank) {
    std::snprintf(buf, sizeof buf,
                  "# async: save() and the optimizer's wait for the snapshot copy take %.1f ms "
                  "(%.1f ms with the writer on the rank's cores; rank 0, medians); ms in save() "
                  "adds waiting for the previous save if it is still being written, and its "
                  "commit\n",
                  median(async->stall) * 1e3, median(async_rank->stall) * 1e3);
    ctx.print(buf);
  }
  const CheckpointWriter& writer = *trainers.memory.memory_checkpoint_writer();
  if (const Mode* memory = find_mode(modes, "memory")) {
    const BuddyLink* hosts = writer.buddy_link();
    std::snprintf(buf, sizeof buf,
                  "# memory tier: %s, every shard also to a buddy rank on another host: %s; "
                  "save() and the wait for its snapshot take %.1f ms, the commit %.1f ms, of "
                  "which waiting for the other ranks %.1f ms (rank 0, medians)\n",
                  writer.stats().empty() ? "?" : writer.stats().back().dir.parent_path().c_str(),
                  hosts && hosts->hosts() > 1 ? "yes" : "no (one host)", median(memory->stall) * 1e3,
                  median(memory->commit) * 1e3, median(memory->peer_wait) * 1e3);
    ctx.print(buf);
  }
  if (const Mode* b = find_mode(modes, "bounded")) {
    std::snprintf(buf, sizeof buf,
                  "# memory tier, bounded: checkpoint.memory_max_stall = %g, every 1 step at "
                  "least; it ended saving every %lld step(s) (a save's measured cost %.1f ms, the "
                  "step %.1f ms; rank 0's save() and snapshot wait %.1f ms, commit %.1f ms, "
                  "waiting for the other ranks %.1f ms, medians); stall/step = (window - "
                  "no-saving window) / steps\n",
                  o.max_stall, static_cast<long long>(b->cadence->interval()),
                  b->cadence->cost_seconds() * 1e3, b->cadence->step_seconds() * 1e3,
                  median(b->stall) * 1e3, median(b->commit) * 1e3, median(b->peer_wait) * 1e3);
    ctx.print(buf);
  }
}

}  // namespace

nlohmann::json measure_stall(const BenchContext& ctx, const StallTrainers& trainers,
                             const TrainConfig& config, const CkptStallOptions& o) {
  const int saves = o.steps / o.every;  // a window's, but in the bounded mode
  char buf[1024];
  std::snprintf(
      buf, sizeof buf,
      "# training: global batch %lld x %d tokens (micro-batch %d), %d thread(s) per rank; "
      "%d warm-up + %d timed steps per mode, %d round(s) rotating the modes, medians\n"
      "# a save every %d step(s) (%d per window; keep %d); stall/save = (window - the same "
      "round's no-saving window) / saves; %% of a step = of a no-saving step\n",
      static_cast<long long>(config.batch().global_batch()), config.model().seq_len(),
      config.batch().micro_batch(), config.runtime().threads(), o.warmup, o.steps, o.rounds,
      o.every, saves, config.checkpoint().keep());
  ctx.print(buf);
  const CpuList& spare = trainers.async_spare.checkpoint_writer()->writer_cpus();
  std::snprintf(buf, sizeof buf,
                "# async save: its background writer on %s; \"rank cores\": on the rank's own "
                "core(s), shared with training (checkpoint.writer_cpus = rank)\n",
                spare.empty() ? "the rank's own core(s): this node has no core that no rank is bound to"
                              : ("spare CPU(s) " + format_cpus(spare) +
                                 " of the node (no rank is bound there; etr-train's default)").c_str());
  ctx.print(buf);
  for (train::Trainer* t :
       {&trainers.async_spare, &trainers.async_rank, &trainers.sync, &trainers.memory}) {
    for (int i = 0; i < o.warmup; ++i) t->train_step();
  }
  MemoryCadence bounded(1, o.max_stall);
  std::vector<Mode> modes = selected_modes(trainers, bounded, o.modes);
  for (int round = 0; round < o.rounds; ++round) {
    for (size_t j = 0; j < modes.size(); ++j) window(ctx, modes[(j + round) % modes.size()], o);
  }
  nlohmann::json out = print_rows(ctx, modes, o);
  print_notes(ctx, modes, trainers, o);
  return out;
}

}  // namespace etr::bench
