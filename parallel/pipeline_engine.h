// PipelineEngine: the step seam (parallel/engine.h) for a pipeline of pp stages on a
// dp x pp grid (parallel/process_grid.h): this rank's chunks of the model
// (parallel/pipeline_stage.h), each with its own engine (data parallel or ZeRO 1-3 over
// the stage's dp group), run by the executor (parallel/pipeline_executor.h) from a
// schedule (parallel/pipeline_schedule.h).
//
// The loop calls begin_step(), run_step() (instead of driving a stack itself), then
// end_backward(), grad_norm(), optimizer_step() as for any engine; the per-layer phases
// (begin_backward, layer_grads_final) belong to the chunks' engines, which the executor
// calls. What differs from one stack:
//   grad_norm    each chunk's norm over its dp group (a borrowed tied copy left out), the
//                squares summed over the pp group
//   states       the whole model's layout: each state moved from the ranks that hold it
//                (each chunk's own tensors, as its engine hands them to a writer of the
//                dp group) to the world's checkpoint writers (ShardPlan over N ranks), so
//                a checkpoint is the same files whatever pp, dp and ZeRO stage wrote it
//   held_states  the chunks' states, read by tensor name: any checkpoint loads into any
//                split
//   parameters   after materialize_parameters(): the whole model on world rank 0 only
//                (generation, export), gathered from the stages
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallel/engine.h"
#include "parallel/pipeline_executor.h"
#include "parallel/pipeline_stage.h"
#include "runtime/host_allocator.h"

namespace etr {

struct PipelineOptions {
  ScheduleSpec schedule;   // kind, stages, virtual stages (micro-batches set per plan)
  std::vector<int> bounds;  // P v + 1 layer boundaries
  // The chunks' device and stream when their stacks and engines run on a device (a GPU;
  // in the tests host memory standing in for one): the transfers are staged
  // (parallel/pipeline_link.h) and the tied gradients pass through the host.
  std::optional<PipeDevice> device;
};

class PipelineEngine final : public Engine {
 public:
  // An engine for chunk `stack` whose first `norm_begin` elements are borrowed copies.
  using EngineFactory = std::function<std::unique_ptr<Engine>(LayerStack<float>& stack, int64_t norm_begin)>;

  // Collective over the grid. `model`: the whole model (its layout and layers' sizes; it is
  // bound to the gathered parameters by materialize_parameters() on world rank 0).
  // `layers`: a second instance of the model's layers, cut into this rank's chunks (which
  // take `model`'s execution context). `alloc`: host memory (checkpoint staging, the whole
  // model on world rank 0); `work_alloc`: the chunks' device's (activations, transfers).
  PipelineEngine(LayerStack<float>& model, std::vector<std::unique_ptr<Layer<float>>> layers,
                 const ProcessGrid& grid, HostAllocator& alloc, Allocator& work_alloc,
                 PipelineOptions options, const EngineFactory& make_engine, Tracer* tracer = nullptr);
  ~PipelineEngine() override;

  const PipelineCut& cut() const { return cut_; }
  PipelineExecutor& executor() { return *executor_; }
  int chunks() const { return static_cast<int>(chunks_.size()); }
  // This rank holds the last virtual stage (the loss; in a V, stage 0 does).
  bool holds_loss() const {
    return cut_.stage_of(cut_.num_vstages() - 1) == grid_.pp_rank();
  }
  LayerStack<float>& chunk_stack(int c) { return *chunks_.at(c); }
  Engine& chunk_engine(int c) { return *engines_.at(c); }
  // Plans the step for `micro_batches` micro-batches of up to B x T (ConfigError when the
  // schedule cannot take them). Again when the number changes.
  void plan(int micro_batches, int64_t B, int64_t T);
  // What plan(micro_batches, B, T) would allocate, without allocating.
  size_t planned_bytes(int micro_batches, int64_t B, int64_t T) const;
  // Runs one step's micro-batches (see PipelineExecutor::run: the loss into *loss_sum, on
  // the chunks' device, on the last stage).
  void run_step(std::span<const Batch> batches, std::span<const double> weights, double* loss_sum);
  // The time the last grad_norm() waited for the other stages (the clipping's stall).
  double norm_wait_seconds() const { return norm_wait_seconds_; }
  // ZB-V's list is placed with unit F, B, W times at plan(); the real ones differ (B
  // slower than W, the loss chunk slower than a block's), and a unit list then idles up
  // to several times its bubble. So the F, B and W times of the plan's steps, summed over
  // the stages with the norm's sum (no extra collective), place it again
  // (list_at_costs: only when shorter at those times with no more buffers) after the
  // plan's steps 2, 4, 8, 16, ... from their mean since step 2 (the first carries first
  // touches), from the next run_step on. Every list adds each chunk's micro-batches in
  // the same order, so the parameters do not depend on which runs. adapt_list: place it
  // at given times and stop measuring (tests). measured_costs: the means last used (unit
  // before any); list_adapted: the list running is not the unit one; placements: lists
  // changed since plan().
  void adapt_list(const ActionCosts& costs);
  const ActionCosts& measured_costs() const { return costs_; }
  bool list_adapted() const { return adapted_; }
  int placements() const { return placements_; }
  // The out-of-memory error begin_step() met and got past ("" when none): the step is to
  // be discarded as after the executor's (PipelineExecutor::failure()).
  const std::string& begin_failure() const { return begin_failure_; }
  // The bubble theory gives the planned schedule (equal forward, input and weight
  // gradient times): the formula for GPipe, 1F1B and interleaved; for ZB-H1 the bound
  // its lists can reach under 1F1B's activation limit (pipeline_schedule.h), since the
  // paper's figure needs more memory than those lists hold.
  double theoretical_bubble() const { return theory_; }

  int zero_stage() const override { return engines_.front()->zero_stage(); }
  FlatState& state() override { return engines_.front()->state(); }
  void initialize_parameters(const std::function<void(const ParamLayout&, float*)>& init) override;
  void restored() override;
  float* parameters() override;
  void materialize_parameters() override;
  float* gradients() override;
  std::vector<HeldState> held_states() override;
  void gather_state(std::string_view name, float* out) override;
  EngineMemory memory() const override;
  WindowBytes predicted_windows(int micro_batches) const override;
  size_t predicted_checkpoint_staging() const override;
  const BucketReducer* reducer() const override { return engines_.front()->reducer(); }
  std::string describe() const override;
  void begin_step() override;
  void begin_backward(bool last) override;
  void layer_grads_final(int layer) override;
  ReduceStats end_backward() override;
  // Each chunk has a layout of its own: ask chunk_engine(c).
  std::vector<GradRange> reduced_gradients(bool owned) override;
  double grad_norm() override;
  void optimizer_step(const OptimizerStep& step) override;
  std::vector<NamedState> states() override;
  // Each rank's pieces in the model's layout: of each of its chunks what the chunk
  // engine's checkpoint writes in the stage's dp group, less the borrowed tied copies.
  std::shared_ptr<const ShardOwners> checkpoint_owners() override;

 private:
  // Collective over the world: every user copy of a tied parameter takes its owner's
  // reduced gradient (the two stages' data-parallel rings may add the replicas in other
  // orders), so that both copies take the same update.
  void sync_ties();
  // Moves state `name` of every chunk into [begin, end) of the model's layout in `out`,
  // on every rank (collective over the world).
  // `held`: chunk_states(), each chunk engine's states (collective in each stage's dp group).
  void collect(const std::vector<std::vector<NamedState>>& held, std::string_view name, float* out,
               int64_t begin, int64_t end);
  // The pieces of state `name` this rank writes, sorted, in the model's layout: of each
  // chunk what its engine's writer in the stage's dp group writes (owned_pieces), less the
  // copies of tied tensors it borrows. The ranks' pieces cover the model once.
  std::vector<StatePiece> own_pieces(const std::vector<std::vector<NamedState>>& held,
                                     std::string_view name) const;
  std::vector<std::vector<NamedState>> chunk_states();

  LayerStack<float>& model_;
  const ProcessGrid& grid_;
  HostAllocator& alloc_;
  PipelineOptions options_;
  PipelineCut cut_;
  std::vector<std::unique_ptr<LayerStack<float>>> chunks_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::unique_ptr<PipelineExecutor> executor_;
  std::shared_ptr<const ShardOwners> owners_;  // checkpoint: every rank's pieces (states())
  Buffer whole_params_, whole_grads_;  // world rank 0, after materialize_parameters()
  double norm_wait_seconds_ = 0;
  Tracer* tracer_ = nullptr;
  int64_t plan_B_ = 0, plan_T_ = 0;  // the last plan()'s micro-batch shape
  int steps_planned_ = 0;            // grad_norm() calls since plan()
  ActionCosts costs_;
  bool adapt_pending_ = false, adapted_ = false, forced_ = false;
  double timed_[6] = {};  // since the plan's second step: F, B, W seconds and counts
  int placements_ = 0;
  std::string begin_failure_;
  double theory_ = 0;
};

}  // namespace etr
