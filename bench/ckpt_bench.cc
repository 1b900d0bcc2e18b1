#include "bench/ckpt_bench.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_context.h"
#include "bench/ckpt_stall.h"
#include "bench/disk_io.h"
#include "bench/table.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/shard_plan.h"
#include "examples/train/trainer.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"
#include "runtime/state_names.h"
#include "runtime/mpi_check.h"
#include "examples/gpt/model_presets.h"

namespace etr::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The states Trainer::save_checkpoint saves, in its order.
const std::vector<std::string> kStates = {std::string(state::kParam), std::string(state::kAdamM),
                                          std::string(state::kAdamV)};

struct CkptArgs {
  std::string dir = ".";
  std::string memory_dir = "/dev/shm";  // the tmpfs the memory tier's modes save into
  std::string preset;  // empty: medium-cpu for the built-in config, the --config's own
  int rounds = 5;
  CkptStallOptions stall;
  std::string config;
  std::vector<std::string> overrides;
  std::string json;
};

// The stated benchmark model: the "medium-cpu" preset (6 layers, d_model 384, seq 256,
// vocab 256: 10.8 M parameters, a 130 MB checkpoint of param + adam.m + adam.v), global
// batch 4 x 256 tokens in micro-batches of 2, AdamW, synthetic data, one thread per rank.
// Unresolved: each trainer adds its checkpoint directory.
TrainConfig base_config(const CkptArgs& a) {
  TrainConfig c = bench_train_config(R"(model { preset: "medium-cpu" }
                                        batch { global_batch: 4 micro_batch: 2 })",
                                     1, "etr-bench ckpt", a.config, {});
  if (!a.preset.empty()) c.mutable_model()->set_preset(a.preset);
  apply_overrides(c, a.overrides);
  return c;
}

// Checkpoints to `dir` only when the bench calls save_checkpoint; etr-train's default
// retention (keep 3), so deleting old checkpoints is part of a save's cost in training.
TrainConfig trainer_config(TrainConfig c, const fs::path& dir, bool async,
                           config::WriterCpus writer_cpus = config::WRITER_CPUS_SPARE) {
  config::CheckpointConfig* ck = c.mutable_checkpoint();
  ck->set_dir(dir.string());
  ck->set_async(async);
  ck->set_writer_cpus(writer_cpus);
  ck->set_keep(3);
  ck->set_every(0);
  ck->set_fast_dir("");
  ck->set_fast_every(0);
  ck->set_resume("");
  resolve(c, gpt::model_presets());
  return c;
}

// The benchmark's own directory inside --dir, "etr-bench-ckpt-<pid of rank 0>": made by
// rank 0, removed by rank 0 at the end (with --dir itself when this run created it).
class WorkDir {
 public:
  WorkDir(const BenchContext& ctx, const fs::path& parent) : root_(ctx.is_root()), parent_(parent) {
    long pid = static_cast<long>(::getpid());
    MPI_CHECK(MPI_Bcast(&pid, 1, MPI_LONG, 0, ctx.world().group().comm()));
    path_ = parent / ("etr-bench-ckpt-" + std::to_string(pid));
    std::string err;
    if (root_) {
      std::error_code ec;
      made_parent_ = !fs::exists(parent, ec);
      fs::create_directories(path_ / "disk", ec);
      if (ec) err = "cannot create " + (path_ / "disk").string() + ": " + ec.message();
    }
    ctx.agree(err);
  }
  ~WorkDir() {
    if (!root_) return;
    std::error_code ec;
    fs::remove_all(path_, ec);
    if (made_parent_) fs::remove(parent_, ec);  // only when empty
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  bool root_;
  bool made_parent_ = false;
  fs::path parent_, path_;
};

// Everything one run measures with. Buffers are allocated and touched once, before any
// timing, so that no measurement pays page faults for its source or destination.
struct Bench {
  BenchContext& ctx;
  const CkptArgs& args;
  const WorkDir& work;
  // The same model: async (writer on spare cores, etr-train's default), async with the
  // writer on the rank's cores, sync.
  std::unique_ptr<train::Trainer> async_trainer, async_rank_trainer, sync_trainer, memory_trainer;
  uint64_t checkpoint_bytes = 0;                                // all shard files
  uint64_t share_bytes = 0;                                     // this rank's shard file
  std::vector<char> source;             // [share_bytes] the disk reference's data
  std::vector<std::vector<float>> dst;  // [3][layout numel] the loader's destination
  std::vector<char> scratch;            // read_sequential's piece

  fs::path reference_file(int rank) const {
    return work.path() / "disk" / ("ref-" + std::to_string(rank) + ".bin");
  }
};

// One measurement, per round: the wall time between the barriers and the CPU time the
// process spent meanwhile (user + system, all its threads: the background writer's too),
// each the largest over the ranks.
struct Series {
  std::vector<double> seconds, cpu_seconds;
};

struct Rounds {
  Series disk_write, save_sync, save_async, disk_read, load_cold, load_warm;
  std::vector<double> async_stall;  // time in save() of the async save
  std::vector<double> resident;     // the most of a file still cached after eviction
};

// Runs `op` on every rank between two barriers and appends its times to `into`. An
// exception on any rank is agreed on: every rank throws AgreedError.
void timed(const BenchContext& ctx, Series& into, const std::function<void()>& op) {
  ctx.sleeping_barrier();
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  std::string err;
  try {
    op();
  } catch (const std::exception& e) {
    err = e.what();
  }
  ctx.sleeping_barrier();
  double times[2] = {std::chrono::duration<double>(Clock::now() - t0).count(),
                     process_cpu_seconds() - cpu0};
  ctx.agree(err);
  ctx.max_over_ranks(times, 2);
  into.seconds.push_back(times[0]);
  into.cpu_seconds.push_back(times[1]);
}

// Evicts `files` from the page cache on every rank; returns the largest fraction of any
// of them still cached afterwards, over the ranks. Every rank evicts twice, the second
// time after all have evicted once: one rank's eviction was seen to leave pages that
// another rank's read had brought in (cached per CPU), which a later eviction dropped.
double evict(const BenchContext& ctx, const std::vector<fs::path>& files) {
  std::string err;
  double resident = 0;
  for (int pass = 0; pass < 2; ++pass) {
    try {
      for (const fs::path& f : files) evict_from_page_cache(f);
    } catch (const std::exception& e) {
      err = e.what();
    }
    ctx.sleeping_barrier();
  }
  try {
    for (const fs::path& f : files) resident = std::max(resident, resident_fraction(f));
  } catch (const std::exception& e) {
    if (err.empty()) err = e.what();
  }
  ctx.agree(err);
  return ctx.max_over_ranks(resident);
}

// Checks the newest save of `t` (every rank's writer agrees on its outcome).
void check_saved(const train::Trainer& t, uint64_t expected_bytes) {
  const SaveStats& s = t.checkpoint_writer()->stats().back();
  if (!s.ok) throw AgreedError("checkpoint save failed: " + s.error);
  if (s.bytes != expected_bytes) {
    throw AgreedError("the checkpoint has " + std::to_string(s.bytes) + " bytes, the plan " +
                      std::to_string(expected_bytes));
  }
}

void measure_writes(Bench& b, int round, Rounds& r) {
  const BenchContext& ctx = b.ctx;
  auto disk = [&] {
    timed(ctx, r.disk_write, [&] {
      write_sequential(b.reference_file(ctx.rank()), b.source.data(), b.source.size());
    });
  };
  auto sync = [&] {
    timed(ctx, r.save_sync, [&] { b.sync_trainer->save_checkpoint("durable"); });
    check_saved(*b.sync_trainer, b.checkpoint_bytes);
  };
  auto async = [&] {
    double stall = 0;
    timed(ctx, r.save_async, [&] {
      const auto t0 = Clock::now();
      b.async_trainer->save_checkpoint("durable");
      stall = std::chrono::duration<double>(Clock::now() - t0).count();
      b.async_trainer->flush_checkpoints();
    });
    r.async_stall.push_back(ctx.max_over_ranks(stall));
    check_saved(*b.async_trainer, b.checkpoint_bytes);
  };
  if (round % 2 != 1) {
    disk(), sync(), async();
  } else {
    async(), sync(), disk();
  }
}

void measure_reads(Bench& b, int round, Rounds& r) {
  const BenchContext& ctx = b.ctx;
  const ParamLayout& layout = b.sync_trainer->model().layout();
  const fs::path ckpt = b.sync_trainer->checkpoint_writer()->stats().back().dir;
  std::vector<fs::path> ckpt_files, ref_files;
  for (const auto& item : fs::directory_iterator(ckpt)) ckpt_files.push_back(item.path());
  for (int i = 0; i < ctx.size(); ++i) ref_files.push_back(b.reference_file(i));
  double resident = 0;
  auto disk = [&] {
    resident = std::max(resident, evict(ctx, ref_files));
    timed(ctx, r.disk_read, [&] {
      for (const fs::path& f : ref_files) read_sequential(f, b.scratch);
    });
  };
  auto load = [&](Series& into) {
    timed(ctx, into, [&] {
      CheckpointReader reader(ckpt);
      for (size_t i = 0; i < kStates.size(); ++i) {
        reader.read_state(kStates[i], layout, b.dst[i].data(), 0, layout.numel());
      }
      if (reader.bytes_read() != b.checkpoint_bytes) {
        throw Error("the load read " + std::to_string(reader.bytes_read()) + " bytes of " +
                    std::to_string(b.checkpoint_bytes));
      }
    });
  };
  auto loads = [&] {
    resident = std::max(resident, evict(ctx, ckpt_files));
    load(r.load_cold);
    load(r.load_warm);
  };
  if (round % 2 != 1) {
    disk(), loads();
  } else {
    loads(), disk();
  }
  r.resident.push_back(resident);
}

// Rank 0 deletes the round's files (untimed); the other ranks wait for it.
void clean_up(Bench& b) {
  if (b.ctx.is_root()) {
    std::error_code ec;
    for (const char* tier : {"sync", "async"}) fs::remove_all(b.work.path() / tier, ec);
    for (int i = 0; i < b.ctx.size(); ++i) fs::remove(b.reference_file(i), ec);
  }
  b.ctx.sleeping_barrier();
}

// One table row: MB/s counts the bytes of every rank over the wall time.
struct Row {
  const char* what;
  const Series* times;
  double bytes_per_rank;
  const Series* reference;  // the disk row to compare with, or null
};

double best(const std::vector<double>& v) {
  return *std::min_element(v.begin(), v.end());
}

nlohmann::json print_bandwidth(const Bench& b, const Rounds& r) {
  const int np = b.ctx.size();
  const double share = static_cast<double>(b.checkpoint_bytes) / np;  // written per rank
  const double whole = static_cast<double>(b.checkpoint_bytes);       // read per rank
  const Row rows[] = {
      {"disk write+fsync", &r.disk_write, share, nullptr},
      {"checkpoint save (sync)", &r.save_sync, share, &r.disk_write},
      {"checkpoint save (async)", &r.save_async, share, &r.disk_write},
      {"disk read (cold)", &r.disk_read, whole, nullptr},
      {"checkpoint load (cold)", &r.load_cold, whole, &r.disk_read},
      {"checkpoint load (warm)", &r.load_warm, whole, nullptr},
  };
  Table t;
  t.add_column("what                      ", 26).add_column("ranks", 5).add_column("MB/rank", 8);
  t.add_column("MB/s best", 9).add_column("MB/s median", 11).add_column("ms median", 9);
  t.add_column("CPU ms", 7).add_column("vs disk", 7);
  b.ctx.print(t.header());
  nlohmann::json out = nlohmann::json::array();
  for (const Row& row : rows) {
    const std::vector<double>& sec = row.times->seconds;
    const double mb = row.bytes_per_rank * np / 1e6;
    std::string versus = "-";
    if (row.reference) {
      // The same round's ratio, so that drift between rounds cancels; median over rounds.
      std::vector<double> ratios;
      for (size_t i = 0; i < sec.size(); ++i) ratios.push_back(row.reference->seconds[i] / sec[i]);
      versus = cell("%.0f%%", 100 * median(ratios));
    }
    b.ctx.print(t.row({cell("%-26s", row.what), cell("%d", np),
                       cell("%.1f", row.bytes_per_rank / 1e6), cell("%.0f", mb / best(sec)),
                       cell("%.0f", mb / median(sec)), cell("%.0f", median(sec) * 1e3),
                       cell("%.0f", median(row.times->cpu_seconds) * 1e3), versus}));
    out.push_back({{"what", row.what},
                   {"ranks", np},
                   {"bytes_per_rank", row.bytes_per_rank},
                   {"round_seconds", sec},
                   {"round_cpu_seconds", row.times->cpu_seconds}});
  }
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "# async save: %.1f ms in save() (the snapshot is copied by its writer thread), "
                "committed %.0f ms after it (medians)\n"
                "# cold: evicted from this machine's page cache first (posix_fadvise DONTNEED; "
                "at most %.1f%% of a file still cached after it, by mincore); the host of a "
                "virtual disk may still cache it%s\n",
                median(r.async_stall) * 1e3, median(r.save_async.seconds) * 1e3,
                100 * *std::max_element(r.resident.begin(), r.resident.end()),
                np > 1 ? "; each rank reads the whole state (a data-parallel replica) and ranks on "
                         "one host share the page cache, so the disk may deliver a byte once for "
                         "all of them: per rank = MB/s / ranks"
                       : "");
  b.ctx.print(buf);
  return {{"rows", out},
          {"async_stall_seconds", r.async_stall},
          {"resident_fraction_after_eviction", r.resident}};
}

void print_header(const Bench& b, const TrainConfig& c) {
  const ParamLayout& layout = b.sync_trainer->model().layout();
  const auto& m = c.model();
  char buf[1024];
  std::snprintf(
      buf, sizeof buf,
      "# etr-bench ckpt: model %s (n_layer %d, d_model %d, seq_len %d, vocab %d), %.2fM "
      "parameters, checkpoint %.1f MB (param + adam.m + adam.v, f32) in %d shard file(s)\n"
      "# dir %s (%s), removed at the end; %s\n"
      "# %d round(s) after a warm-up one, alternating the disk references and the checkpoint; MB/s "
      "= bytes of all "
      "ranks / wall time between barriers (MB = 1e6 bytes); CPU ms = the process's CPU time "
      "meanwhile (all threads, the slowest rank); vs disk = median over rounds of the round's "
      "disk time / its time\n"
      "# writes: 8 MiB write()s, fsync, rename, fsync dir (save: + pack, XXH3, manifest); "
      "reads: every rank reads the whole state\n",
      m.preset().empty() ? "(sizes given)" : m.preset().c_str(), m.n_layer(), m.d_model(),
      m.seq_len(), m.vocab_size(), static_cast<double>(layout.param_count()) / 1e6,
      static_cast<double>(b.checkpoint_bytes) / 1e6, b.ctx.size(), b.work.path().c_str(),
      file_system_name(b.work.path()).c_str(), b.ctx.machine().placement().c_str(), b.args.rounds);
  b.ctx.print(buf);
}

void run(BenchContext& ctx, const CkptArgs& a) {
  // Ranks that share a CPU would measure the scheduler, not the disk and the stall.
  ctx.require_own_cores("etr-bench ckpt", {.threads = 1});
  const WorkDir work(ctx, a.dir);
  const TrainConfig base = base_config(a);
  Logger& log = ctx.world().log();
  const LogLevel level = log.level();
  log.set_level(LogLevel::kWarn);  // the trainers' and writers' info lines would break the table
  Bench b{ctx, a, work, nullptr, nullptr, nullptr, nullptr, 0, 0, {}, {}, {}};
  const TrainConfig async_config = trainer_config(base, work.path() / "async", true);
  b.async_trainer = std::make_unique<train::Trainer>(async_config, ctx.world());
  b.async_rank_trainer = std::make_unique<train::Trainer>(
      trainer_config(base, work.path() / "async-rank", true, config::WRITER_CPUS_RANK),
      ctx.world());
  // The memory tier in --memory-dir's tmpfs: emptied at the start, removed at the end.
  TrainConfig memory_config = trainer_config(base, work.path() / "memory-disk", true);
  const fs::path memory_dir =
      fs::path(a.memory_dir) / ("etr-bench-mem-" + work.path().filename().string());
  memory_config.mutable_checkpoint()->set_memory_every(1);
  memory_config.mutable_checkpoint()->set_memory_dir(memory_dir.string());
  b.memory_trainer = std::make_unique<train::Trainer>(memory_config, ctx.world());
  b.sync_trainer = std::make_unique<train::Trainer>(
      trainer_config(base, work.path() / "sync", false), ctx.world());
  const ParamLayout& layout = b.sync_trainer->model().layout();
  const ShardPlan plan(layout, ctx.size(), kStates);
  for (int r = 0; r < ctx.size(); ++r) b.checkpoint_bytes += plan.file_bytes(r);
  b.share_bytes = plan.file_bytes(ctx.rank());
  b.source.assign(b.share_bytes, 0);
  for (size_t i = 0; i < b.source.size(); ++i) b.source[i] = static_cast<char>(i * 131 + 7);
  b.dst.assign(kStates.size(), std::vector<float>(static_cast<size_t>(layout.numel()), 0.f));
  b.scratch.assign(kDiskChunkBytes, 0);
  print_header(b, async_config);

  // Round -1 warms up (the page cache's free pages, the files' metadata) and is dropped.
  Rounds r;
  for (int round = -1; round < a.rounds; ++round) {
    Rounds warmup;
    measure_writes(b, round, round < 0 ? warmup : r);
    measure_reads(b, round, round < 0 ? warmup : r);
    clean_up(b);
  }
  nlohmann::json rows = print_bandwidth(b, r);
  nlohmann::json stall =
      measure_stall(ctx, {*b.async_trainer, *b.async_rank_trainer, *b.sync_trainer, *b.memory_trainer},
                    async_config, a.stall);
  b.memory_trainer.reset();  // its writer's thread ends before the directory goes
  if (ctx.is_root()) {
    std::error_code ec;
    fs::remove_all(memory_dir, ec);
  }
  log.set_level(level);
  if (!a.json.empty()) {
    ctx.write_json(a.json, {{"benchmark", "ckpt"},
                            {"config", format_config(async_config)},
                            {"machine", ctx.machine().to_json()},
                            {"dir", work.path().string()},
                            {"file_system", file_system_name(work.path())},
                            {"checkpoint_bytes", b.checkpoint_bytes},
                            {"rounds", a.rounds},
                            {"bandwidth", rows},
                            {"training", stall}});
  }
  ctx.sleeping_barrier();  // nobody still reads when rank 0 removes the files
}

}  // namespace

void add_ckpt_subcommand(CLI::App& app, SubcommandList& list) {
  auto args = std::make_shared<CkptArgs>();
  CLI::App* cmd = app.add_subcommand(
      "ckpt",
      "Checkpoint save/load bandwidth beside the disk's, and the training stall of "
      "saving (run at np 1 and 2: bench/run_ckpt.sh)");
  cmd->add_option("--dir", args->dir,
                  "Directory on the checkpoints' disk; the run works in a new subdirectory "
                  "of it and removes it")
      ->capture_default_str();
  cmd->add_option("--memory-dir", args->memory_dir, "A tmpfs for the memory tier's modes")
      ->capture_default_str();
  cmd->add_option("--preset", args->preset, "Model preset (default: medium-cpu, 130 MB)");
  cmd->add_option("--rounds", args->rounds, "Bandwidth rounds alternating disk and checkpoint")
      ->capture_default_str();
  cmd->add_option("--train-rounds", args->stall.rounds,
                  "Training rounds rotating no saving, async saving (writer on spare and on the "
                  "rank's cores) and sync saving")
      ->capture_default_str();
  cmd->add_option("--steps", args->stall.steps, "Timed training steps per mode and round")
      ->capture_default_str();
  cmd->add_option("--warmup", args->stall.warmup, "Untimed training steps first")
      ->capture_default_str();
  cmd->add_option("--every", args->stall.every, "Save every this many steps in training")
      ->capture_default_str();
  cmd->add_option("--max-stall", args->stall.max_stall,
                  "The bounded memory tier's checkpoint.memory_max_stall: its saves as sparse "
                  "as keeps their measured cost within this fraction of a step")
      ->capture_default_str()
      ->check(CLI::Range(0.0001, 0.9));
  cmd->add_option("--modes", args->stall.modes,
                  "Training modes timed beside no saving: all, or a comma-separated list of "
                  "async, async-rank, sync, memory, bounded")
      ->capture_default_str()
      ->check([](const std::string& v) -> std::string {
        if (v == "all") return "";
        std::stringstream list(v);
        for (std::string key; std::getline(list, key, ',');) {
          if (key != "async" && key != "async-rank" && key != "sync" && key != "memory" &&
              key != "bounded") {
            return "unknown mode '" + key + "'; use all, or some of async, async-rank, sync, "
                   "memory, bounded";
          }
        }
        return "";
      });
  add_training_config_options(cmd, args->config, args->overrides, args->json);
  list.push_back({cmd, [args](BenchContext& ctx) {
                    const CkptStallOptions& s = args->stall;
                    if (args->rounds < 1 || s.rounds < 1 || s.steps < 1 || s.warmup < 0 ||
                        s.every < 1 || s.steps % s.every != 0) {
                      throw ConfigError(
                          "--rounds, --train-rounds, --steps and --every must be "
                          "at least 1, --warmup at least 0, and --steps a "
                          "multiple of --every");
                    }
                    run(ctx, *args);
                  }});
}

}  // namespace etr::bench
