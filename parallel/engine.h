// Engine: the step seam of the training engine (DESIGN.md, "The training engine"). The
// training loop (parallel/train_session.h) calls an engine at named phases of every
// optimizer step; engines differ in what each rank holds and communicates:
//
//   data parallel (parallel/data_parallel_engine.h)   every rank holds all the state;
//       gradients are allreduced in buckets while backward runs
//   ZeRO 1-3 (next)                                   a shard of optimizer state,
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
#pragma once

#include <cstdint>
#include <string>
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

class Engine {
 public:
  virtual ~Engine() = default;

  // The flat state this rank holds (param, grad and the optimizer's states).
  virtual FlatState& state() = 0;
  // One line for the start-up log ("data parallel: 4 ranks; 12 gradient buckets ...").
  virtual std::string describe() const = 0;

  virtual void begin_step() = 0;
  // Before a micro-batch's backward; only the last micro-batch of a step communicates.
  virtual void begin_backward(bool last) = 0;
  virtual void before_forward(int /*layer*/) {}
  virtual void before_backward(int /*layer*/) {}
  // Layer `layer`'s gradients are final for this micro-batch (layers in decreasing order).
  virtual void layer_grads_final(int layer) = 0;
  // Waits for the step's gradient communication; rethrows a CommError.
  virtual ReduceStats end_backward() = 0;
  // Global L2 norm of the step's gradients, summed over what each rank holds; the same
  // value on every rank (or not finite on every rank, when it is not finite anywhere).
  virtual double grad_norm() = 0;
  // Clips to step.max_norm and updates the held parameters and optimizer state.
  virtual void optimizer_step(const OptimizerStep& step) = 0;
  // The states a checkpoint saves, in order, as full flat buffers of the layout.
  virtual std::vector<NamedState> states() = 0;

  // Hooks that forward the stack's per-layer calls to this engine.
  StackHooks hooks();
};

}  // namespace etr
