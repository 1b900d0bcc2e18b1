// `etr-bench ckpt`: checkpoint save and load bandwidth of the example GPT-2's training
// state (param + adam.m + adam.v, f32) beside the disk's own bandwidth measured in the
// same run and the same directory, and the training stall of saving. Run at np 1 and
// np 2 by bench/run_ckpt.sh. In alternating rounds it measures:
//   disk write+fsync    each rank writes its share of the checkpoint's bytes (the shard
//                       plan's split) in 8 MiB write()s, fsync, rename (bench/disk_io.h)
//   save (sync)         CheckpointWriter::save, to the committed manifest
//   save (async)        the same in the background: time in save(), and to commit
//   disk read (cold)    every rank reads every reference file, evicted from the page
//                       cache first (each rank of a data-parallel job needs the whole state)
//   load (cold, warm)   CheckpointReader::read_state of the three states, whole, on every
//                       rank; cold: the checkpoint's files evicted first
// each timed between barriers (wall time of the slowest rank); then, in rounds that
// alternate the modes, training steps with no saving, async saving every k steps and
// sync saving every k steps, and the stall per save as a fraction of a step.
#pragma once

#include "bench/subcommand.h"

namespace etr::bench {

void add_ckpt_subcommand(CLI::App& app, SubcommandList& list);

}  // namespace etr::bench
