// The training stall of checkpointing, for `etr-bench ckpt` (bench/ckpt_bench.h): the
// same model trained with no saving, with async saving every k steps (its writer on the
// node's spare cores, etr-train's default, and on the rank's own cores), with sync
// saving every k steps, and with the memory tier (checkpoint.memory_every: each rank's
// shard into the host's tmpfs, async, with the buddy copy when there are several hosts)
// every k steps, and the memory tier bounded by checkpoint.memory_max_stall (its saves as
// sparse as it takes to keep their measured cost within that fraction of a step:
// parallel/memory_cadence.h), in rounds that rotate the order of the modes.
//
// Each window times `steps` optimizer steps in steady state: a saving mode starts one save
// just before the clock starts and, as its last, one just before it stops, so the window
// holds steps / k saves and, like every stretch of a long run, begins and ends with one
// save in flight; the pending one is flushed after the clock stops. Then
//   stall per save = (window time - the same round's no-saving window time) / saves
// (median over rounds), given in ms and as a fraction of a no-saving step; for the bounded
// mode, whose saves per window vary, the stall per step (window difference / steps) as
// that fraction, the figure its bound is about. It includes
// everything saving costs the step: waiting for the snapshot copy, waiting for the previous
// save when it is still being written, the commit (manifest, renames, deleting old
// checkpoints) and the background writer's competition for the rank's core. Trainer has no poll(), so an
// async save commits in the next save() (its flush) instead of at the first step boundary
// after its write ends, as etr-train's loop does: the same work on the same thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "bench/bench_context.h"
#include "examples/train/trainer.h"
#include "runtime/config/train_config.h"

namespace etr::bench {

struct CkptStallOptions {
  int rounds = 5;  // rounds rotating the modes (medians over them)
  int steps = 10;  // timed steps per mode and round; a multiple of every
  int warmup = 2;  // untimed steps of each trainer first
  int every = 1;   // k: a save after every k-th step
  double max_stall = 0.01;  // the bounded memory-tier mode's checkpoint.memory_max_stall
  // The modes beside no saving: "all", or some of async, async-rank, sync, memory, bounded
  // (comma-separated)
  std::string modes = "all";
};

// The same model (`config`) with three checkpoint writers; the no-saving mode trains
// `async_spare`.
struct StallTrainers {
  train::Trainer& async_spare;  // async, checkpoint.writer_cpus = spare
  train::Trainer& async_rank;   // async, checkpoint.writer_cpus = rank
  train::Trainer& sync;
  train::Trainer& memory;       // the memory tier (save_checkpoint("memory"))
};

// Collective. Prints the table on rank 0 and returns the figures.
nlohmann::json measure_stall(const BenchContext& ctx, const StallTrainers& trainers,
                             const TrainConfig& config, const CkptStallOptions& options);

}  // namespace etr::bench
