// The pipeline tests' model and batch (pipeline_test.cc, gradient_check_test.cc): the tiny
// GPT with 6 blocks (8 layers: pp 4 x 2 chunks fit), global batch 12 in micro-batches of 1
// (12 micro-batches per pipeline at dp 1, 6 at dp 2: every schedule's m is a multiple of
// pp), buckets of 8 and 20 KiB, the cut by parameters, clipping at 0.5 (`extra` overrides);
// and what they compare: a run's state after some steps, bit for bit or by its largest difference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "examples/gpt/model_presets.h"
#include "examples/train/trainer.h"
#include "runtime/config/train_config.h"
#include "runtime/state_names.h"

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


struct State {
  std::vector<float> param, m, v;
  std::vector<double> losses;
};

inline State train(Trainer& t, int steps) {
  State s;
  for (int i = 0; i < steps; ++i) s.losses.push_back(t.train_step().loss);
  s.param = t.gather_state(state::kParam);
  s.m = t.gather_state(state::kAdamM);
  s.v = t.gather_state(state::kAdamV);
  return s;
}

inline bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = a.size() == b.size() ? 0 : INFINITY;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  return d;
}

inline void expect_bitwise(const State& want, const State& got, const std::string& what) {
  EXPECT_TRUE(same(want.param, got.param)) << what << ": parameters, max diff " << max_diff(want.param, got.param);
  EXPECT_TRUE(same(want.m, got.m)) << what << ": adam.m, max diff " << max_diff(want.m, got.m);
  EXPECT_TRUE(same(want.v, got.v)) << what << ": adam.v, max diff " << max_diff(want.v, got.v);
  EXPECT_EQ(want.losses, got.losses) << what << ": losses";
}

}  // namespace etr::train::testing_config
