// Engine: the step seam of the training engine (docs/design.md, "The training engine"). The
// training loop (parallel/train_session.h) calls an engine at named phases of every
// optimizer step; engines differ in what each rank holds and communicates:
//
//   data parallel (parallel/data_parallel_engine.h)   every rank holds all the state;
//       gradients are allreduced in buckets while backward runs (ZeRO stage 0)
//   ZeRO 1-3 (parallel/zero_engine.h)                 a shard of optimizer state,
//       gradients, parameters; reduce-scatter, gather before use
//
// One step, on every rank in the same order:
//
//   begin_step()                       gradients zeroed
//   for each micro-batch m of k:
//     begin_backward(last = m == k-1)  before its backward: only the last one communicates
//     forward: before_forward(L), L = 0..n-1        (hooks of LayerStack)
//     backward: before_backward(L), layer_grads_final(L), L = n-1..0
//   end_backward()                     waits for the step's communication
//   grad_norm()                        global L2 norm over what each rank holds
//   optimizer_step(...)                clip, update the held range, gather if sharded
//
// and states() names the flat buffers a checkpoint saves (param, adam.m, adam.v).
// Parameters are initialised once, before the first step, by initialize_parameters().
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/shard_plan.h"
#include "parallel/bucket_reducer.h"
#include "runtime/flat_state.h"
#include "runtime/layer_stack.h"

namespace etr {

struct OptimizerStep {
  int64_t t = 0;        // 1-based optimizer step (AdamW's bias correction)
  double lr = 0;        // learning rate of this step
  double grad_norm = 0;  // from grad_norm()
  double max_norm = 0;  // clip to this global norm (<= 0: no clipping)
};

// A range of the layout's summed gradient that a rank holds, and where it is.
struct GradRange {
  HeldRange range;
  float* data = nullptr;  // data[0] is element range.begin
};

// A state and the FlatState holding this rank's part of it (restore fills its ranges).
struct HeldState {
  std::string name;
  FlatState* holder = nullptr;
};

// What one rank holds, in bytes, beside the ZeRO paper's figure (fp32 AdamW, Psi
// parameters, N ranks): stage 0 16 Psi, 1 8 Psi + 8 Psi / N, 2 4 Psi + 12 Psi / N,
// 3 16 Psi / N, plus at stages 2 and 3 the working set of gathered parameters and
// gradients not yet reduced (gathered_peak, unreduced_peak).
struct EngineMemory {
  int stage = 0;
  int ranks = 1;
  int64_t psi = 0;              // parameters of the model (the layout's tensors)
  size_t params = 0;            // held for the whole run: replicas and shards
  size_t grads = 0;
  size_t optimizer = 0;
  size_t gathered_peak = 0;     // stage 3: most gathered parameter bytes at once
  size_t unreduced_peak = 0;    // stages 2-3: most gradient bytes not reduced yet at once
  size_t checkpoint_staging = 0;  // buffers a checkpoint's states are gathered into
  size_t state_bytes() const { return params + grads + optimizer; }
  double analytic_bytes() const;
  // "parameters 1.2 MiB, gradients ..., state 3.4 MiB (ZeRO paper: 3.4 MiB)"
  std::string describe() const;
};

// The part of the 16 Psi bytes of fp32 AdamW state one of `ranks` ranks keeps at ZeRO
// stage `stage` (EngineMemory::analytic_bytes() / 16 Psi).
double zero_state_share(int stage, int ranks);

class Engine {
 public:
  virtual ~Engine() = default;

  virtual int zero_stage() const = 0;
  // The FlatState holding the optimizer state (adam.m, adam.v) of this rank: everything
  // at stage 0, a shard above.
  virtual FlatState& state() = 0;
  // Collective: runs `init` (may be null: zeros) on a full flat parameter buffer, makes
  // every rank's parameters rank 0's, and keeps what this rank holds.
  virtual void initialize_parameters(const std::function<void(const ParamLayout&, float*)>& init) = 0;
  // All of the layout's parameters, in host memory; at stage 3 only between
  // materialize_parameters() and the next step. Waits for a parameter gather in flight.
  // An engine whose state is on a GPU (DeviceEngine) returns a copy: writes are lost.
  virtual float* parameters() = 0;
  // Collective: makes parameters() whole (stage 3 gathers every bucket; the others wait
  // for their gathers), e.g. before an evaluation or an export.
  virtual void materialize_parameters() {}
  // After an evaluation: what materialize_parameters() gathered beyond a step's needs goes
  // back (stage 3 releases every gathered bucket; the next step gathers as it goes).
  virtual void release_parameters() {}
  // The full gradient buffer of the step in progress (between begin_step and the update).
  virtual float* gradients() = 0;
  // The states a restore fills, with their holders (host memory).
  virtual std::vector<HeldState> held_states() = 0;
  // After a restore has filled held_states(): an engine whose state lives elsewhere (a
  // GPU) takes it from there.
  virtual void restored() {}
  // Collective: the full flat buffer of state `name` (param, adam.m, adam.v) into `out`.
  virtual void gather_state(std::string_view name, float* out) = 0;
  virtual EngineMemory memory() const = 0;
  // Predictions for the memory model (parallel/memory_model.h), known before a step runs:
  // the most bytes of the ZeRO 2-3 windows at once (gradients not reduced yet, gathered
  // parameters) in a step of `micro_batches`, and the checkpoint staging a save allocates.
  struct WindowBytes {
    size_t grads = 0;
    size_t params = 0;
  };
  virtual WindowBytes predicted_windows(int /*micro_batches*/) const { return {}; }
  virtual size_t predicted_checkpoint_staging() const { return 0; }
  // Null on one rank.
  virtual const BucketReducer* reducer() const { return nullptr; }
  // The squared norm of this rank's own gradient before the step's reduction, measured
  // when measure_local_norm(true) (BucketReducer::measure_local_norm); NaN without a
  // reducer (one rank).
  virtual void measure_local_norm(bool /*on*/) {}
  virtual double local_grad_sq_norm() const { return std::nan(""); }
  // One line for the start-up log ("data parallel: 4 ranks; 12 gradient buckets ...").
  virtual std::string describe() const = 0;

  virtual void begin_step() = 0;
  // After begin_step() threw OutOfMemory part-way (a ZeRO-3 window of a pipeline stage's
  // gathers, which begin_step launches): makes what it had not made, each part at most
  // once (the collectives it launched are not launched again), so the step goes on and
  // its failure is agreed at its end.
  virtual void finish_begin_step() {}
  // Before a micro-batch's backward; only the last micro-batch of a step communicates.
  virtual void begin_backward(bool last) = 0;
  virtual void before_forward(int /*layer*/) {}
  virtual void before_backward(int /*layer*/) {}
  // Layer `layer`'s gradients are final for this micro-batch (layers in decreasing order).
  virtual void layer_grads_final(int layer) = 0;
  // Waits for the step's gradient communication; rethrows a CommError.
  virtual ReduceStats end_backward() = 0;
  // After end_backward(): the summed gradient this rank holds. `owned`: only the ranges
  // this rank answers for in the group (ZeroPlan::norm_ranges: each element on exactly one
  // rank); otherwise every range it holds (all of it at stage 0, the replicated tail on
  // every rank). Writable: a pipeline overwrites a tied copy's gradient with its owner's.
  virtual std::vector<GradRange> reduced_gradients(bool owned) = 0;
  // Global L2 norm of the step's gradients, summed over what each rank holds; the same
  // value on every rank (or not finite on every rank, when it is not finite anywhere).
  virtual double grad_norm() = 0;
  // Clips to step.max_norm and updates the held parameters and optimizer state.
  virtual void optimizer_step(const OptimizerStep& step) = 0;
  // Collective. The states a checkpoint saves, in order; each covers at least the flat
  // range the checkpoint writer of this group takes from this rank
  // (ShardPlan::flat_range). Valid until the next step.
  virtual std::vector<NamedState> states() = 0;
  // Collective (over the world, at the first call; kept after): which flat ranges each
  // rank's checkpoint file holds, the owners states() hands the writer; nullptr: the even
  // split (ShardPlan). Reads no state, so the memory model can size a save before any.
  virtual std::shared_ptr<const ShardOwners> checkpoint_owners() { return nullptr; }

  // Hooks that forward the stack's per-layer calls to this engine.
  StackHooks hooks();
};

}  // namespace etr
