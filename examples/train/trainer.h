// Trainer: the training loop of etr-train for the example GPT-2 (one process until data
// parallelism lands).
//
// One optimizer step (DESIGN.md, "Execution of one optimizer step"):
//   1. batch policy: global batch B sequences = micro-batch b x accumulation k
//   2. for each micro-batch: gather its samples (sampler, by global sample index),
//      forward, loss, backward; gradients accumulate, scaled by 1 / (B T) so the loss
//      is the mean over the global batch's tokens
//   3. global-norm clip, AdamW at the scheduled learning rate
//   4. progress line, metrics (JSON lines), evaluation and sampling when due
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "examples/data/sampler.h"
#include "examples/data/token_file.h"
#include "examples/data/window_space.h"
#include "examples/gpt/gpt_model.h"
#include "runtime/adamw.h"
#include "runtime/config/train_config.h"
#include "runtime/host_allocator.h"
#include "runtime/world.h"

namespace etr::train {

struct StepStats {
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double seconds = 0;
};

struct RunSummary {
  int64_t steps = 0;
  double first_loss = 0;
  double final_loss = 0;
  double final_val_loss = -1;  // -1: never evaluated
  double seconds = 0;
  double tokens_per_second = 0;
  size_t peak_bytes = 0;
  std::string sample;
};

class Trainer {
 public:
  // `config` must be resolved (runtime/config/train_config.h).
  Trainer(const TrainConfig& config, World& world);

  RunSummary run();
  StepStats train_step();
  double evaluate();
  // Continues `prompt` by `tokens` tokens, sampling at temperature 1 with a fixed seed.
  std::string generate(const std::string& prompt, int tokens);

  gpt::GptModel<float>& model() { return *model_; }
  const data::DataPosition& position() const { return position_; }

 private:
  void load_data();
  void log_step(const StepStats& s);
  void write_metrics(const std::string& json_line);

  TrainConfig config_;
  World& world_;
  Logger& log_;
  HostAllocator alloc_;
  gpt::GptConfig model_config_;
  std::unique_ptr<gpt::GptModel<float>> model_;
  std::unique_ptr<AdamW> optimizer_;
  AdamWOptions adamw_;
  Buffer m_, v_;  // AdamW moments, the parameters' layout
  std::vector<uint16_t> synthetic_;
  std::optional<data::TokenFile> file_;
  std::span<const uint16_t> tokens_;
  std::optional<data::DataSplit> split_;
  std::optional<data::Sampler> sampler_;
  data::DataPosition position_;
  std::vector<int32_t> inputs_, targets_;
  std::ofstream metrics_;
  int64_t accumulation_ = 1;
};

}  // namespace etr::train
