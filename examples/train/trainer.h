// Trainer: etr's training loop (parallel/train_session.h) with the example GPT-2
// (gpt_program.h), as tests and etr-bench use it. It holds no logic of its own: the loop,
// checkpoints and elasticity are the library's, the model and data the example's.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "examples/gpt/gpt_config.h"
#include "examples/train/gpt_program.h"
#include "parallel/train_session.h"
#include "runtime/state_names.h"

namespace etr::train {

using ::etr::NonFiniteError;
using ::etr::RunSummary;
using ::etr::StepStats;

// The GPT-2 being trained: its configuration and flat buffers (views into the session's
// FlatState).
class GptView {
 public:
  GptView(TrainSession& s, gpt::GptConfig c) : s_(s), c_(std::move(c)) {}
  const gpt::GptConfig& config() const { return c_; }
  const ParamLayout& layout() const { return s_.stack().layout(); }
  // All parameters (ZeRO-3: after engine().materialize_parameters()); on a GPU a host copy
  // (writes to it are lost).
  float* params() const { return s_.engine().parameters(); }
  // The gradient buffer: device memory on a GPU.
  float* grads() const { return s_.engine().gradients(); }

 private:
  TrainSession& s_;
  gpt::GptConfig c_;
};

class Trainer {
 public:
  Trainer(const TrainConfig& config, const Group& group, Logger& log,
          ElasticReporter* elastic = nullptr)
      : session_(config, group, log, gpt::training_program(), elastic) {}
  Trainer(const TrainConfig& config, World& world, ElasticReporter* elastic = nullptr)
      : Trainer(config, world.group(), world.log(), elastic) {}

  RunSummary run() { return session_.run(); }
  StepStats train_step() { return session_.train_step(); }
  int64_t skipped_steps() const { return session_.skipped_steps(); }
  double evaluate() { return session_.evaluate(); }
  std::string generate(const std::string& prompt, int tokens) {
    session_.engine().materialize_parameters();  // ZeRO-3: collective
    return gpt::generate(session_.host_stack(), model().config(),
                         gpt::TrainingTokenizer::from(session_.config()), prompt, tokens,
                         session_.config().model().init_seed());
  }
  void write_trace() { session_.write_trace(); }
  bool save_checkpoint(const std::string& tier) { return session_.save_checkpoint(tier); }
  void flush_checkpoints() { session_.flush_checkpoints(); }
  void restore(const std::filesystem::path& dir) { session_.restore(dir); }
  const std::optional<std::filesystem::path>& resumed_from() const { return session_.resumed_from(); }
  const CheckpointWriter* checkpoint_writer() const { return session_.checkpoint_writer(); }
  const CheckpointWriter* memory_checkpoint_writer() const { return session_.memory_checkpoint_writer(); }

  GptView model() { return GptView(session_, gpt::GptConfig::from(session_.config().model())); }
  // The optimizer state this rank holds (all of it at ZeRO stage 0; see gather_state).
  const float* adam_m() { return session_.engine().state().data<float>(state::kAdamM); }
  const float* adam_v() { return session_.engine().state().data<float>(state::kAdamV); }
  // Collective: the full flat buffer of state `name` at any ZeRO stage.
  std::vector<float> gather_state(std::string_view name) {
    std::vector<float> out(static_cast<size_t>(session_.stack().layout().numel()));
    session_.engine().gather_state(name, out.data());
    return out;
  }
  const DataPosition& position() const { return session_.position(); }
  const ProcessGrid& grid() const { return session_.grid(); }
  // Null without a pipeline (parallel.pp = 1).
  PipelineEngine* pipeline() { return session_.pipeline(); }
  const RankBatch& rank_batch() const { return session_.rank_batch(); }
  const BucketReducer* reducer() const { return session_.reducer(); }
  Tracer& tracer() { return session_.tracer(); }
  TrainSession& session() { return session_; }

 private:
  TrainSession session_;
};

}  // namespace etr::train
