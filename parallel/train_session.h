// TrainSession: the training loop of etr, for any model built as a LayerStack, on one rank
// or data-parallel over many (docs/design.md, "Execution of one optimizer step").
//
// One optimizer step:
//   1. the batch policy (parallel/batch_policy.h) splits the global batch B over the
//      data-parallel ranks; rank r runs k_r micro-batches of at most micro_batch samples
//   2. for each micro-batch: gather its samples from the DataSource (by global sample
//      index), forward, loss, backward through the LayerStack; gradients accumulate,
//      scaled by 1 / (B T) so that their sum over ranks is the gradient of the mean loss
//      over the global batch's tokens. The engine (parallel/engine.h) is called at each
//      phase: on the last micro-batch it sums each layer's final gradients over the ranks
//      while backward goes on
//   3. finite or stop: a loss or gradient norm that is NaN or infinite (decided alike on
//      every rank, from the summed loss and a flag summed with it) stops the run, or skips
//      the step (optimizer.skip_nonfinite_steps), before anything changes the parameters
//      or moments; then global-norm clipping and AdamW at the scheduled learning rate
//   4. progress line, metrics, trace (parallel/step_report.h); held-out loss when due;
//      a checkpoint when due (parallel/checkpoint_cadence.h); a resize agreed on at the
//      step boundary stops the run for etr-run (parallel/elastic_session.h)
// Replicas start equal: rank 0's initial parameters are broadcast.
//
// What a model brings: a TrainProgram (a LayerStack factory with its initialisation, a
// data source factory, and optional callbacks for a sample and an export at the end).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/host_communicator.h"
#include "parallel/batch_controller.h"
#include "parallel/batch_policy.h"
#include "parallel/checkpoint_cadence.h"
#include "parallel/data_parallel_engine.h"
#include "parallel/zero_engine.h"
#include "parallel/data_source.h"
#include "parallel/elastic_session.h"
#include "parallel/engine_call_log.h"
#include "parallel/fault_injection.h"
#include "parallel/memory_model.h"
#include "parallel/pipeline_engine.h"
#include "parallel/step_agreement.h"
#include "parallel/process_grid.h"
#include "parallel/step_report.h"
#include "parallel/token_staging.h"
#include "runtime/config/train_config.h"
#include "runtime/device_context.h"
#include "runtime/elastic.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"
#include "runtime/cuda_graph.h"
#include "runtime/layer_stack.h"
#include "runtime/memory_budget.h"
#include "runtime/log.h"
#include "runtime/trace.h"
#include "runtime/world.h"

namespace etr {


// A step's loss or gradient norm was not finite and no more skips were allowed
// (optimizer.skip_nonfinite_steps). Thrown by every rank alike; not the fault of a host,
// and a relaunch from the last checkpoint would meet it again.
class NonFiniteError : public Error {
 public:
  using Error::Error;
};

// What the factories of a TrainProgram are given.
struct SessionContext {
  const TrainConfig& config;
  Logger& log;
  bool leader;           // rank 0 of the data-parallel group: logs for the job
  HostAllocator& alloc;  // the host memory budget (runtime.memory_budget)
  int threads;           // the kernels' threads on this rank
  int ranks;             // data-parallel ranks
};

// A model for the loop: its layers and how to initialise them.
struct ModelSpec {
  std::unique_ptr<LayerStack<float>> stack;
  // The same layers in bf16, for mixed precision (runtime.precision bf16, and auto on a
  // GPU): its layout must be stack's. Null: the model trains in fp32 only (bf16 asked
  // for is a ConfigError; auto falls back to fp32). `stack` stays the fp32 twin the
  // session samples and exports with.
  std::unique_ptr<LayerStack<bf16>> stack_bf16;
  // "GPT-2 6 layers, 512 wide, ..." for the start-up log.
  std::string description;
  // For the progress line's GFLOP/s (0: shown as 0).
  double flops_per_token = 0;
  // Writes the initial parameters (a flat buffer of stack->layout()); run on every rank,
  // then rank 0's are broadcast. Null: parameters start at 0.
  std::function<void(const ParamLayout& layout, float* params)> init;
};

// The engines' options from a config: buckets and overlap (parallel.*), comm.*, AdamW.
DataParallelOptions data_parallel_options(const TrainConfig& c);

class TrainSession;

struct TrainProgram {
  std::function<ModelSpec(const SessionContext&)> model;
  // Called after the model is built (the memory it left is in ctx.alloc).
  std::function<std::unique_ptr<DataSource>(const SessionContext&)> data;
  // At the end of a run that was not stopped for a resize, on rank 0 only: a text sample
  // (log.sample_tokens > 0), and an export of the weights (output.export_safetensors).
  std::function<std::string(TrainSession&)> sample;
  std::function<void(TrainSession&)> export_weights;
  // Files every checkpoint carries in its manifest (etr-train: its tokenizer's model, so
  // that etr-ckpt export can hand it on); called once on every rank. Null: none.
  std::function<std::vector<ckpt::Attachment>(const TrainConfig&)> attachments;
};

class TrainSession {
 public:
  // `config` must be resolved (runtime/config/train_config.h). Collective over `group`:
  // every rank of it builds a session with the same config and trains one replica (data
  // parallel, dp = group.size()). ConfigError when the batch does not fit the ranks or
  // the data. Under etr-run, pass its `elastic` reporter.
  TrainSession(const TrainConfig& config, const Group& group, Logger& log,
               const TrainProgram& program, ElasticReporter* elastic = nullptr);
  ~TrainSession();

  // Trains until schedule.max_steps (with an automatic global batch: until the schedule's
  // scale-invariant progress reaches it).
  RunSummary run();
  // The schedule is over, or schedule.stop_at_step is reached.
  bool finished() const;
  // One optimizer step. Throws NonFiniteError naming the step when its loss or gradient
  // norm is not finite and optimizer.skip_nonfinite_steps allows no more skips (every
  // rank alike; parameters, moments and data position as before the step, and a
  // checkpoint in flight committed first).
  StepStats train_step();
  int64_t skipped_steps() const { return step_.skipped; }
  // Mean held-out loss per token; the held-out samples are split over the ranks
  // (collective). NaN when the data source has none.
  double evaluate();
  // Collective: writes the trace (log.trace_file) when tracing; rank 0 writes the file.
  void write_trace();

  // Collective: saves the state after the steps completed so far to the "durable" or
  // "fast" tier. Returns false when the save failed (logged; training may go on).
  bool save_checkpoint(const std::string& tier);
  // Collective: waits for a background save and commits it.
  void flush_checkpoints();
  // Collective: loads the engine's states, data position and schedule from the
  // checkpoint directory `dir` (saved from any world size). Throws CheckpointError.
  // `tier`: where it was found ("durable", "fast", "memory-local", "memory-buddy").
  void restore(const std::filesystem::path& dir, const std::string& tier = "durable") {
    restore(ResumePoint{dir, tier, nullptr});
  }
  void restore(const ResumePoint& point);
  const std::optional<std::filesystem::path>& resumed_from() const { return resumed_from_; }
  const CheckpointWriter* checkpoint_writer() const { return checkpoints_->writer(); }
  const CheckpointWriter* memory_checkpoint_writer() const { return checkpoints_->memory_writer(); }

  const TrainConfig& config() const { return config_; }
  LayerStack<float>& stack() { return *model_.stack; }
  // The fp32 stack for use on the host (generation reads the logits there): on a GPU it is
  // moved to the host with a copy of the parameters, and the session trains no more
  // steps; under bf16 on the host it is bound to a copy of the master taken at each call;
  // otherwise the stack itself. (stack() is that fp32 stack as it is: under bf16 it is
  // bound only once host_stack() has run.)
  LayerStack<float>& host_stack();
  Engine& engine() { return *engine_; }
  // Micro-batches replayed from a CUDA graph so far (runtime.cuda_graphs; 0 without).
  int64_t graph_launches() const { return dev_.graphs ? dev_.graphs->launches() : 0; }
  const DataSource& data() const { return *data_; }
  const DataPosition& position() const { return position_; }
  const ProcessGrid& grid() const { return *grid_; }
  const RankBatch& rank_batch() const { return batch_->rank_batch(); }
  // Null on one rank.
  const BucketReducer* reducer() const { return engine_->reducer(); }
  Tracer& tracer() { return tracer_; }
  HostAllocator& allocator() { return alloc_; }
  Logger& log() { return log_; }
  bool leader() const { return grid_->rank() == 0; }
  // Null without a pipeline (parallel.pp = 1).
  PipelineEngine* pipeline() { return pipeline_; }
  // Where the layers and the state are (runtime.device; session_device.cc), and the
  // allocator of their memory there: alloc() on the host, the GPU's caching allocator on
  // a GPU (the memory model and the micro-batch follow its budget).
  Device device() const { return dev_.context.device(); }
  Allocator& work_alloc() { return dev_.alloc ? *dev_.alloc : static_cast<Allocator&>(alloc_); }
  const Allocator& work_alloc() const {
    return dev_.alloc ? *dev_.alloc : static_cast<const Allocator&>(alloc_);
  }
  // On a GPU, the device memory the job holds by the driver's count, the most at a step's
  // end so far (StepStats::device_peak_bytes); 0 on the host.
  size_t device_peak_bytes() const { return dev_.peak; }
  // Sums `values` over the data-parallel ranks in place (a no-op on one rank).
  void sum_over_ranks(double* values, int count);

  // The batch policy (parallel/batch_controller.h): the plan, the micro-batch the memory
  // budget holds, recomputation, the out-of-memory recovery, the shares, the automatic
  // global batch. The activations are taken at the start of each step and given back to
  // the allocator's cache at its end (session_memory.cc); an OutOfMemory while taking them
  // or inside the step's micro-batches is agreed on by every rank, and the step runs again
  // as the controller re-plans it.
  const BatchController& batch() const { return *batch_; }
  const MemoryModel& memory_model() const { return batch_->memory_model(); }
  int64_t micro_batch() const { return batch_->micro_batch(); }
  bool recompute() const { return batch_->recompute(); }
  int64_t oom_recoveries() const { return batch_->oom_recoveries(); }
  // Recomputation tried for speed: 0 not tried, 1-2 timing, 3 decided.
  int recompute_trial_phase() const { return batch_->trial_phase(); }
  int64_t memory_replans() const { return batch_->replans(); }
  // Shares: how often batch.shares = throughput moved them.
  int64_t share_rebalances() const { return batch_->rebalances(); }
  // The automatic global batch: the smoothed gradient noise scale (NaN before it has one
  // and without), the schedule's progress in base-batch steps (the step otherwise).
  double noise_scale() const { return batch_->noise_scale(); }
  double schedule_progress() const { return batch_->schedule_progress(position_.step); }
  const BatchPlan& batch_plan() const { return batch_->plan(); }
  // The model's peak at the current micro-batch.
  size_t predicted_peak() const { return batch_->predicted_peak(); }
  // On the host: what the process holds outside the allocator (the binary, MPI's buffers
  // and shared segments, OpenBLAS's, the data, the collectives' scratch), measured once,
  // after the first step, as resident bytes less the allocator's reserved ones; 0 before
  // it and on a GPU. predicted_resident_peak() adds it to predicted_peak(): the kernel's
  // count (VmHWM, peak_resident_bytes()) the memory model predicts.
  size_t outside_bytes() const { return mem_.outside_bytes; }
  // Host RAM this rank's checkpoint memory tier holds at its peak (memory_tier_bytes in
  // parallel/checkpoint_cadence.h), taken off the host budget; 0 without the tier.
  size_t memory_tier_bytes() const { return mem_.memory_tier; }
  size_t predicted_resident_peak() const { return predicted_peak() + mem_.outside_bytes; }
  // What `etr-train --plan` prints: the memory model's table for this rank.
  std::vector<std::string> memory_plan() const;

 private:
  void build(const TrainProgram& program, const Group& group);
  // The device (session_device.cc).
  void setup_device(const Group& group);
  void read_device_budget(size_t cut);
  template <typename Real>
  void place_stack(LayerStack<Real>& stack);
  // runtime.precision against the device and the model (session_device.cc): sets dev_.mixed.
  void choose_precision();
  // comm.device_backend on GPUs (session_device.cc; collective): true for NCCL.
  bool choose_nccl();
  // f(the stack that trains): the bf16 one under mixed precision, else the fp32 one.
  template <typename F>
  decltype(auto) with_stack(F&& f) {
    if (dev_.mixed) return f(*model_.stack_bf16);
    return f(*model_.stack);
  }
  void move_stack_to_host();
  void zero_step_loss();
  void fetch_step_loss();
  double step_loss();
  void poison_gradient(float* at);
  double gradient_sq_norm(const float* g, int64_t n);
  void measure_device_peak();
  std::unique_ptr<Engine> make_engine(LayerStack<float>& stack, int64_t norm_begin = 0);
  void build_pipeline(const TrainProgram& program, const SessionContext& ctx);
  void gather_stage_activation_bytes();
  void run_pipeline(int64_t B, int64_t T);
  // ETR_TEST_HOST_DEVICE_ENGINE=1 on the host: the GPU's paths on host memory.
  bool device_path_on_host() const;
  void log_memory() const;
  void measure_outside();
  void setup_parallel();
  void resume();
  // Returns the seconds of forward and backward (for the shares).
  double run_micro_batches(int64_t B, int64_t T);
  void skip_or_stop(StepStats& st, bool loss_finite);
  // The step's pieces (train_step.cc).
  void check_step_start();
  double step_learning_rate();
  void inject_nonfinite_gradient();
  StepAgreement local_agreement(double grad_norm, double compute_seconds);
  void apply_optimizer(const StepStats& st);
  void finish_step(StepStats& st, const StepAgreement& agreed, double compute_seconds, int64_t B);
  void after_step(const StepStats& s, int64_t start, RunSummary& sum);
  // Rank 0: a decision's logged line, also as TensorBoard text under `tag` at `step`
  // (the step its line names).
  void report_decision(uint64_t step, const std::string& tag, const std::string& text);
  // Memory (session_memory.cc): the budget read, the batch controller built and told of
  // each plan, the activations taken and given back, ZeRO's gradient mode.
  void setup_batch();
  void setup_memory();
  void setup_memory_tier();  // mem_.memory_tier: this rank's memory-tier bytes (collective)
  void read_budget();
  void planned(int64_t micro_batch);
  void acquire_activations();
  void release_activations();
  bool zero_reduces_each(int64_t b);
  void choose_zero_reduction(int64_t micro_batch);
  // ETR_SLOW_RANK: this rank made `seconds` of compute slower (train_step.cc).
  void slow_down(double seconds) const;

  TrainConfig config_;
  Logger& log_;
  std::unique_ptr<ProcessGrid> grid_;
  HostAllocator alloc_;
  // Where the layers run and what the session keeps there (session_device.cc).
  struct DeviceSide {
    DeviceContext context;
    std::unique_ptr<Allocator> alloc;  // a GPU's (null on the host)
    std::unique_ptr<TokenStaging> staging;
    double host_scalars[2] = {0, 0};  // the loss sum and a scratch, on the host
    Buffer scalars_buffer;            // the same on a GPU
    double* scalars = host_scalars;
    PinnedBuffer loss_copy;           // the step's loss, read once
    size_t driver_base = 0, peak = 0;
    size_t budget = 0;                // the device's (this rank's share), before the test's cut
    int sharing = 1;                  // ranks of this node on this rank's GPU
    bool budget_read = false;
    std::unique_ptr<FlatState> host_state;  // move_stack_to_host
    bool mixed = false;  // bf16 layers with f32 master state (runtime.precision)
    bool nccl = false;   // gradients summed by NCCL on the GPUs (comm.device_backend)
    std::unique_ptr<CudaGraphCache> graphs;  // runtime.cuda_graphs on a GPU
  } dev_;
  // The host's memory: the budget as last read and logged, what is outside the allocator.
  struct HostMemory {
    bool budget_read = false;
    size_t logged_budget = 0;
    size_t outside_bytes = 0;
    bool outside_measured = false;
    bool activations_held = false;  // the stack's activations are taken for this step
    size_t memory_tier = 0;  // host RAM of the checkpoint memory tier, off the host budget
    std::unique_ptr<MemoryBudget> budget;  // the host's (runtime/memory_budget.h)
  } mem_;
  // What the steps carry from one to the next (train_step.cc).
  struct StepScratch {
    std::vector<int32_t> inputs, targets;  // [micro_batch, T] (a pipeline: every micro-batch's)
    std::string oom;                        // this rank's out-of-memory error in this step, if any
    int64_t skipped = 0;                    // steps skipped for a non-finite loss or norm
    double optimizer_seconds = 0;           // the last step's optimizer
  } step_;
  ModelSpec model_;
  std::unique_ptr<DataSource> data_;
  DataPosition position_;
  Tracer tracer_;
  std::unique_ptr<Engine> engine_;
  PipelineEngine* pipeline_ = nullptr;  // engine_, when parallel.pp > 1
  std::unique_ptr<HostCommunicator> control_comm_;  // small sums: loss, flags, evaluation
  std::unique_ptr<CheckpointCadence> checkpoints_;
  std::unique_ptr<ElasticSession> elastic_;
  std::unique_ptr<StepReporter> reporter_;
  TrainProgram program_;
  StackHooks hooks_;  // the engine's, counted by calls_, for the stack
  // The step's engine calls (no pipeline): a rank whose compute ran out of memory makes
  // the rest without compute, and the step is redone (parallel/engine_call_log.h).
  std::unique_ptr<EngineCallLog> calls_;
  std::vector<double> stage_activation_bytes_;  // a pipeline: planned per stage
  FaultInjection faults_;  // the tests' hooks (parallel/fault_injection.h)
  std::optional<std::filesystem::path> resumed_from_;
  // The initial parameters wait for resume(): a restore overwrites them, so a relaunch
  // neither draws them nor broadcasts them (one data-parallel engine; a pipeline's chunks
  // borrow tensors at initialisation, so it initialises in build()).
  bool init_deferred_ = false;
  std::unique_ptr<BatchPeers> peers_;          // the grid, for the batch decisions
  std::unique_ptr<BatchController> batch_;     // the plan and the policies that change it
  // A micro-batch's forward and backward, through dev_.graphs where it may be captured.
  void run_micro_batch(const Batch& batch, int64_t b, int64_t B, bool last);
};

}  // namespace etr
