#include "bench/ckpt_stall.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/table.h"

namespace etr::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Mode {
  const char* name;
  train::Trainer* trainer;
  bool saves;
  const char* tier;  // what save_checkpoint() is given
  std::vector<double> seconds;   // per round: the timed window, the slowest rank's
  std::vector<double> cpu;       // per round: the process's CPU time in it (all threads)
  std::vector<double> in_save;   // every timed save() call, the slowest rank's
  std::vector<double> stall;     // every save: the writer's stall (rank 0's): save() and
                                 // waiting for the snapshot copy
};

// One timed window of `o.steps` steps of mode `m` (see ckpt_stall.h for the steady state).
void window(const BenchContext& ctx, Mode& m, const CkptStallOptions& o) {
  train::Trainer& t = *m.trainer;
  const bool memory = std::string(m.tier) == "memory";
  const CheckpointWriter& writer = memory ? *t.memory_checkpoint_writer() : *t.checkpoint_writer();
  const size_t first = writer.stats().size();
  if (m.saves) {
    t.train_step();  // untimed: this step's save must not be the previous window's last one
    t.save_checkpoint(m.tier);
  }
  std::vector<double> in_save;
  ctx.sleeping_barrier();
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  for (int i = 1; i <= o.steps; ++i) {
    t.train_step();
    if (m.saves && i % o.every == 0) {
      const auto s0 = Clock::now();
      t.save_checkpoint(m.tier);
      in_save.push_back(seconds_since(s0));
    }
  }
  ctx.sleeping_barrier();
  double times[2] = {seconds_since(t0), process_cpu_seconds() - cpu0};
  ctx.max_over_ranks(times, 2);
  m.seconds.push_back(times[0]);
  m.cpu.push_back(times[1]);
  if (!m.saves) return;
  t.flush_checkpoints();
  ctx.max_over_ranks(in_save.data(), static_cast<int>(in_save.size()));
  m.in_save.insert(m.in_save.end(), in_save.begin(), in_save.end());
  const std::vector<SaveStats>& stats = writer.stats();
  for (size_t i = first; i < stats.size(); ++i) {
    if (!stats[i].ok) throw AgreedError("checkpoint save failed in training: " + stats[i].error);
    m.stall.push_back(stats[i].stall_seconds);
  }
}

}  // namespace

nlohmann::json measure_stall(const BenchContext& ctx, const StallTrainers& trainers,
                             const TrainConfig& config, const CkptStallOptions& o) {
  const int saves = o.steps / o.every;
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
  const std::string every = std::to_string(o.every);
  std::vector<Mode> modes = {
      {"no saving", &trainers.async_spare, false, "durable", {}, {}, {}, {}},
      {"async save", &trainers.async_spare, true, "durable", {}, {}, {}, {}},
      {"async, rank cores", &trainers.async_rank, true, "durable", {}, {}, {}, {}},
      {"sync save", &trainers.sync, true, "durable", {}, {}, {}, {}},
      {"memory tier", &trainers.memory, true, "memory", {}, {}, {}, {}}};
  for (int round = 0; round < o.rounds; ++round) {
    for (size_t j = 0; j < modes.size(); ++j) window(ctx, modes[(j + round) % modes.size()], o);
  }

  Table t;
  t.add_column("mode                      ", 26).add_column("ranks", 5).add_column("ms/step best", 12);
  t.add_column("ms/step median", 14).add_column("CPU ms/step", 11).add_column("ms in save()", 12);
  t.add_column("stall/save ms", 13).add_column("% of a step", 11);
  ctx.print(t.header());
  const double step_ms = median(modes[0].seconds) / o.steps * 1e3;
  nlohmann::json out = nlohmann::json::array();
  for (const Mode& m : modes) {
    std::vector<double> stall_ms;  // per round
    for (size_t r = 0; r < m.seconds.size(); ++r) {
      stall_ms.push_back((m.seconds[r] - modes[0].seconds[r]) / saves * 1e3);
    }
    const double stall = median(stall_ms);
    std::vector<double> per_step = m.seconds;
    for (double& s : per_step) s = s / o.steps * 1e3;
    const std::string name = m.saves ? std::string(m.name) + " every " + every : m.name;
    ctx.print(t.row({cell("%-26s", name.c_str()), cell("%d", ctx.size()),
                     cell("%.1f", *std::min_element(per_step.begin(), per_step.end())),
                     cell("%.1f", median(per_step)), cell("%.1f", median(m.cpu) / o.steps * 1e3),
                     m.saves ? cell("%.1f", median(m.in_save) * 1e3) : "-",
                     m.saves ? cell("%.1f", stall) : "-",
                     m.saves ? cell("%.1f%%", 100 * stall / step_ms) : "-"}));
    out.push_back({{"mode", name},
                   {"ranks", ctx.size()},
                   {"round_seconds", m.seconds},
                   {"round_cpu_seconds", m.cpu},
                   {"steps", o.steps},
                   {"saves", m.saves ? saves : 0},
                   {"stall_ms_per_save", m.saves ? stall : 0.0},
                   {"in_save_seconds", m.in_save},
                   {"writer_stall_seconds", m.stall}});
  }
  std::snprintf(buf, sizeof buf,
                "# async: save() and the optimizer's wait for the snapshot copy take %.1f ms "
                "(%.1f ms with the writer on the rank's cores; rank 0, medians); ms in save() "
                "adds waiting for the previous save if it is still being written, and its "
                "commit\n",
                median(modes[1].stall) * 1e3, median(modes[2].stall) * 1e3);
  ctx.print(buf);
  const BuddyLink* hosts = trainers.memory.memory_checkpoint_writer()->buddy_link();
  std::snprintf(buf, sizeof buf,
                "# memory tier: %s, every shard also to a buddy rank on another host: %s; "
                "save() and the wait for its snapshot take %.1f ms (rank 0, median)\n",
                trainers.memory.memory_checkpoint_writer()->stats().empty()
                    ? "?"
                    : trainers.memory.memory_checkpoint_writer()->stats().back().dir.parent_path().c_str(),
                hosts && hosts->hosts() > 1 ? "yes" : "no (one host)", median(modes[4].stall) * 1e3);
  ctx.print(buf);
  return out;
}

}  // namespace etr::bench
