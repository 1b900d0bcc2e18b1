// EngineCallLog: one step's engine calls from the training stack (the hooks before each
// layer's forward and backward, after each layer's backward, and begin_backward between a
// micro-batch's forward and backward), counted as they are made, so that a rank whose
// compute failed part-way through a step (out of memory: a ZeRO window, a device buffer,
// anything) can make the calls it has not made yet without computing. Its peers, which
// made them with compute, meet it in every collective those calls start (a bucket's
// reduction, a ZeRO gather), so the failure is agreed at the step's end instead of
// leaving them waiting in a collective (TrainSession::train_step discards the step and
// redoes it with half the micro-batch).
//
// The calls of micro-batch m (of k) on a stack of L layers, in order:
//   before_forward(0) .. before_forward(L-1), begin_backward(m == k-1),
//   before_backward(L-1), after_backward(L-1), .., before_backward(0), after_backward(0)
// A call that threw counts as not made: complete() makes it again.
#pragma once

#include <cstdint>

#include "parallel/engine.h"
#include "runtime/layer_stack.h"

namespace etr {

class EngineCallLog {
 public:
  EngineCallLog(Engine& engine, int layers) : engine_(engine), layers_(layers) {}

  // A step of `micro_batches` starts: nothing made yet.
  void begin_step(int micro_batches);
  // The engine's hooks, counted.
  StackHooks hooks();
  void begin_backward(bool last);
  // The next after_backward(layer) of the step's last micro-batch throws OutOfMemory
  // before it reaches the engine (a test's fault, ETR_OOM_IN_BACKWARD_AT_STEP); once.
  void fail_in_backward(int layer) { fail_layer_ = layer; }
  // Makes every call of the step not made yet, in order, without compute.
  void complete();
  int64_t made() const { return made_; }

 private:
  int64_t per_micro_batch() const { return 3 * static_cast<int64_t>(layers_) + 1; }
  void make(int64_t index);  // the call at `index` of the step
  void after_backward(int layer);

  Engine& engine_;
  int layers_;
  int micro_batches_ = 0;
  int64_t made_ = 0;
  int fail_layer_ = -1;
};

}  // namespace etr
