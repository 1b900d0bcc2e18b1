// The pipeline tests' model and batch (pipeline_test.cc, gradient_check_test.cc): the tiny
// GPT with 6 blocks (8 layers: pp 4 x 2 chunks fit), global batch 12 in micro-batches of 1
// (12 micro-batches per pipeline at dp 1, 6 at dp 2: every schedule's m is a multiple of
// pp), buckets of 8 and 20 KiB, the cut by parameters, clipping at 0.5 (`extra` overrides).
#pragma once

#include <string>
#include <vector>

#include "examples/gpt/model_presets.h"
#include "runtime/config/train_config.h"

namespace etr::train::testing_config {

inline TrainConfig pipeline_config(const std::vector<std::string>& extra) {
  TrainConfig c = parse_config(R"(
    model { preset: "tiny" n_layer: 6 }
    optimizer { lr: 3e-3 grad_clip: 0.5 }
    schedule { warmup_steps: 1 max_steps: 100 }
    batch { global_batch: 12 micro_batch: 1 }
    data { synthetic: true synthetic_size: "64KiB" val_fraction: 0.1 }
    parallel { first_bucket_size: "8KiB" bucket_size: "20KiB" pp_partition: "params" }
    log { log_every: 1000 eval_every: 0 log_level: LOG_LEVEL_WARN }
    runtime { threads: 1 }
  )");
  apply_overrides(c, extra);
  resolve(c, gpt::model_presets());
  return c;
}

}  // namespace etr::train::testing_config
