// Trainer: the training loop of etr-train for the example GPT-2, on one rank or
// data-parallel over many (mpirun -np N etr-train ...).
//
// One optimizer step (DESIGN.md, "Execution of one optimizer step"):
//   1. batch policy: the global batch B is split over the data-parallel ranks
//      (BatchPlan::balanced); rank r runs k_r micro-batches of at most micro_batch
//   2. for each micro-batch: gather its samples (sampler, by global sample index),
//      forward, loss, backward; gradients accumulate, scaled by 1 / (B T) so that their
//      sum over ranks is the gradient of the mean loss over the global batch's tokens.
//      On the last micro-batch each layer's final gradients are handed to the bucket
//      reducer as backward goes, which sums them over the ranks while backward continues
//   3. wait for the buckets; finite or stop: a loss or gradient norm that is NaN or
//      infinite (decided alike on every rank, from the summed loss and a flag summed with
//      it) stops the run, or skips the step (optimizer.skip_nonfinite_steps), before
//      anything changes the parameters or moments; global-norm clip, AdamW at the
//      scheduled learning rate (on every rank, on identical gradients, so the replicas
//      stay identical)
//   4. progress line (rank 0), metrics (JSON lines, rank 0), evaluation (split over the
//      ranks) and sampling when due, trace events
// Replicas start equal: rank 0's initial parameters are broadcast.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_writer.h"
#include "collectives/host_communicator.h"
#include "parallel/batch_policy.h"
#include "examples/data/sampler.h"
#include "examples/data/token_file.h"
#include "examples/data/window_space.h"
#include "examples/gpt/gpt_model.h"
#include "parallel/bucket_reducer.h"
#include "parallel/process_grid.h"
#include "runtime/adamw.h"
#include "runtime/config/train_config.h"
#include "runtime/elastic.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"
#include "runtime/log.h"
#include "runtime/trace.h"
#include "runtime/world.h"

namespace etr::train {

// A step's loss or gradient norm was not finite and no more skips were allowed
// (optimizer.skip_nonfinite_steps). Thrown by every rank alike; not the fault of a host,
// and a relaunch from the last checkpoint would meet it again.
class NonFiniteError : public Error {
 public:
  using Error::Error;
};

struct StepStats {
  double loss = 0;  // mean over the global batch's tokens (every rank has it)
  double lr = 0;
  double grad_norm = 0;
  double seconds = 0;
  // Gradient communication (nothing on one rank): see parallel/bucket_reducer.h.
  ReduceStats comm;
  // Some rank had a resize request (SIGUSR1 from etr-run) when the step's sums were
  // taken: every rank sees the same value.
  bool resize = false;
  // The loss or gradient norm was not finite and optimizer.skip_nonfinite_steps let the
  // step be skipped: parameters and moments are as before it (the data moved on).
  bool skipped = false;
};

struct RunSummary {
  int64_t start_step = 0;  // the step training started (or resumed) from
  int64_t steps = 0;       // steps run by this run() call
  double first_loss = 0;
  double final_loss = 0;
  double final_val_loss = -1;  // -1: never evaluated
  double seconds = 0;
  double tokens_per_second = 0;
  size_t peak_bytes = 0;
  // StepStats::comm summed over comm_steps steps (all but the first, which warms up).
  ReduceStats comm;
  int64_t comm_steps = 0;
  int64_t skipped_steps = 0;  // StepStats::skipped in this run() call
  std::string sample;
  // The run stopped early for etr-run to relaunch it at another size (a checkpoint of the
  // last step was saved); the program should exit with kResizeExitCode.
  bool resized = false;
};

class Trainer {
 public:
  // `config` must be resolved (runtime/config/train_config.h). Collective over `group`:
  // every rank of it constructs a Trainer with the same config and trains one replica
  // (data parallel, dp = group.size()). Throws ConfigError when the global batch has
  // fewer sequences than there are ranks.
  //
  // Under etr-run, pass its `elastic` reporter (runtime/elastic.h): rank 0 reports restore,
  // progress and events to it and logs what a relaunch cost, and run() stops at a step
  // boundary when a resize is requested. Without one (or when it is inactive) a resize
  // request is ignored.
  Trainer(const TrainConfig& config, const Group& group, Logger& log,
          ElasticReporter* elastic = nullptr);
  Trainer(const TrainConfig& config, World& world, ElasticReporter* elastic = nullptr)
      : Trainer(config, world.group(), world.log(), elastic) {}
  ~Trainer();

  RunSummary run();
  // One optimizer step. Throws NonFiniteError naming the step when its loss or gradient norm is
  // not finite and optimizer.skip_nonfinite_steps allows no more skips (every rank alike;
  // the parameters, moments and data position are as before the step, and a checkpoint
  // in flight is committed first).
  StepStats train_step();
  // Steps skipped so far for a non-finite loss or gradient norm.
  int64_t skipped_steps() const { return skipped_steps_; }
  // Mean held-out loss per token; the windows are split over the ranks (collective).
  double evaluate();
  // Continues `prompt` by `tokens` tokens, sampling at temperature 1 with a fixed seed.
  std::string generate(const std::string& prompt, int tokens);
  // Collective: writes the trace (log.trace_file) when tracing; rank 0 writes the file.
  void write_trace();

  // Checkpoints (checkpoint.* in the config). Collective. Saves the state after the
  // steps completed so far to the durable ("durable") or fast ("fast") tier; async per
  // checkpoint.async. Returns false when the save failed (logged; training may go on).
  bool save_checkpoint(const std::string& tier);
  // Collective: waits for a background save and commits it.
  void flush_checkpoints();
  // Collective: loads parameters, optimizer moments, data position and schedule from the
  // checkpoint directory `dir` (saved from any world size). Throws CheckpointError. It
  // does not check the shard files' checksums: resuming (checkpoint.resume) picks `dir`
  // with find_resumable, which does.
  void restore(const std::filesystem::path& dir);
  // The checkpoint this trainer resumed from (checkpoint.resume), if any.
  const std::optional<std::filesystem::path>& resumed_from() const { return resumed_from_; }
  // Null unless checkpoint.dir or checkpoint.fast_dir is set.
  const CheckpointWriter* checkpoint_writer() const { return ckpt_writer_.get(); }

  gpt::GptModel<float>& model() { return *model_; }
  // AdamW's moments, flat buffers of the parameters' layout (model().layout()).
  const float* adam_m() const { return static_cast<const float*>(m_.data()); }
  const float* adam_v() const { return static_cast<const float*>(v_.data()); }
  const data::DataPosition& position() const { return position_; }
  const ProcessGrid& grid() const { return *grid_; }
  const RankBatch& rank_batch() const { return plan_->rank(grid_->dp_rank()); }
  // Null on one rank.
  const BucketReducer* reducer() const { return reducer_.get(); }
  Tracer& tracer() { return tracer_; }

 private:
  void setup_parallel();
  void setup_checkpoints();
  void checkpoint_if_due(int64_t step, bool last);
  // A resize was agreed on at `step`: saves a checkpoint of it (fast tier when there is
  // one) and waits until it is committed.
  void save_for_resize(int64_t step);
  void log_relaunch(int64_t first_step) const;
  ckpt::Manifest checkpoint_meta() const;
  void load_data();
  void log_step(const StepStats& s);
  // A step's loss or gradient norm is not finite (every rank calls it alike): skips the
  // step (marks `st`) or, past optimizer.skip_nonfinite_steps, commits a checkpoint in
  // flight and throws NonFiniteError naming the step.
  void skip_or_stop(StepStats& st, bool loss_finite);
  // For tests of finite-or-stop: the step (1-based, as the progress line counts) at which
  // ETR_NONFINITE_AT_STEP=S[:R] puts a NaN into this rank's gradients; -1 for none.
  static int64_t nonfinite_step_from_env(int rank);
  void write_metrics(const std::string& json_line);
  // Sums `values` over the data-parallel ranks in place (a no-op on one rank).
  void sum_over_ranks(double* values, int count);
  bool leader() const { return grid_->dp_rank() == 0; }

  TrainConfig config_;
  Logger& log_;
  std::unique_ptr<ProcessGrid> grid_;
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
  std::optional<BatchPlan> plan_;
  data::DataPosition position_;
  std::vector<int32_t> inputs_, targets_;  // [micro_batch, T]
  std::ofstream metrics_;
  Tracer tracer_;
  // Data parallel (dp > 1): gradient buckets on their own communicator, whose progress
  // thread never runs on the caller (inline_bytes = 0); small sums (loss, evaluation)
  // on another.
  std::unique_ptr<HostCommunicator> grad_comm_;
  std::unique_ptr<HostCommunicator> control_comm_;
  std::unique_ptr<BucketReducer> reducer_;
  int64_t fail_at_step_ = -1;  // ETR_FAIL_AT_STEP (tests): throw at that step
  int64_t nonfinite_at_step_ = nonfinite_step_from_env(grid_->rank());
  int64_t skipped_steps_ = 0;  // optimizer.skip_nonfinite_steps: skipped so far
  // Where the global batch in force took effect: (0, 0), or the step and sample a resume
  // with another batch.global_batch started from. The manifest records them so that its
  // data position can be checked against its step (checkpoint/manifest.h).
  uint64_t batch_origin_step_ = 0, batch_origin_samples_ = 0;
  // Checkpoints: one writer (one save in flight) for both tiers.
  std::unique_ptr<CheckpointWriter> ckpt_writer_;
  CheckpointTier durable_tier_, fast_tier_;
  std::optional<std::filesystem::path> resumed_from_;
  ElasticReporter* elastic_ = nullptr;
  double restore_seconds_ = 0;
};

}  // namespace etr::train
