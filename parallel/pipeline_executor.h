// PipelineExecutor: runs a pipeline schedule (parallel/pipeline_schedule.h) on this
// rank's chunks (parallel/pipeline_stage.h), one optimizer step at a time.
//
// Protocol of one step, on every rank of a pipeline, in its list's order:
//   kRecvActivation   an irecv of the chunk's input into a free input buffer (posted
//                     early, so the transfer overlaps the compute before it)
//   kForward          waits for it; forward into a free activation slot of the chunk
//   kSendActivation   an isend of the chunk's output (from the slot's activations, which
//                     stay until the slot's backward)
//   kRecvGrad         an irecv of the gradient of the chunk's output
//   kBackward         waits for it; backward, the input's gradient into the slot's send
//                     buffer; the slot and the input buffer are free again
//   kSendGrad         an isend of that gradient
//   kBackwardInput    (ZB-H1) the input's gradient only; the dout buffer is free again
//   kBackwardWeight   (ZB-H1) the weight gradients; with the gradient sent, the slot
//                     and the input buffer are free again
//   kOptimizerStep    the tied gradient's send (user side) and every other send waited for
// Transfers are nonblocking MPI on the caller's thread (parallel/pipeline_link.h: no
// thread hand-off on the critical path; the collectives' timeout turns a dead or stuck
// peer into a CommError naming the transfer and the stage). Messages are tagged by
// (micro-batch, receiving virtual stage, kind).
//
// On a device (the chunks' stacks run on a GPU; or, in the tests, host memory standing in
// for one): activations, received inputs and gradients are device buffers from the
// executor's allocator, every transfer is staged through the link's host buffers, the
// loss accumulates into a device scalar (LayerStack::forward_accumulate) and the tied
// gradient is added on the device (DeviceOps::add): the host enqueues and never waits
// for the device but for a transfer's bytes.
//
// Each chunk has its own engine (data parallel or ZeRO over the stage's dp group): its
// hooks run around every layer, and only the chunk's last backward of the step is
// "final" (begin_backward(true), layer_grads_final), so its buckets are reduced while
// the rest of the pipeline drains. A tied parameter's gradient (Tie): at the user's final
// backward its part is sent to the owner, which adds it at its own final backward before
// that layer is final (it was sent long before: the owner's last backward depends on the
// user's), so the owner's reduction sums both; the user's copy then takes the owner's
// reduced sum (PipelineEngine::sync_ties).
//
// Out of memory part-way through a step (a ZeRO window, a device buffer, anything the
// compute allocates): the rank runs the rest of its list without compute, making each
// action's transfers and the engine calls it had not made (parallel/pipeline_calls.h), so
// its dp peers and pipeline neighbours complete the step; failure() says so, and the
// session discards the step and redoes it with half the micro-batch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "parallel/engine.h"
#include "parallel/pipeline_calls.h"
#include "parallel/pipeline_link.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_stage.h"
#include "parallel/process_grid.h"
#include "runtime/allocator.h"
#include "runtime/error.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/trace.h"

namespace etr {

struct TieSide;  // one side of a tied parameter's exchange (pipeline_executor.cc)

// One of this rank's chunks.
struct PipelineChunk {
  int vstage = 0;
  LayerStack<float>* stack = nullptr;
  Engine* engine = nullptr;
};

// What a step measured.
struct PipelineStepStats {
  double wall_seconds = 0;     // the schedule's actions, first to last
  double compute_seconds = 0;  // forward and backward
  // Where the time went: compute by kind (seconds, and how many actions), the waits for a
  // received activation or gradient, and the waits for an earlier send to leave a buffer
  // (before its reuse, and at the end of the step).
  double forward_seconds = 0, backward_seconds = 0, input_grad_seconds = 0, weight_grad_seconds = 0;
  int forwards = 0, backwards = 0, input_grads = 0, weight_grads = 0;
  double recv_wait_seconds = 0, send_wait_seconds = 0;
  // On the caller's thread: posting the transfers (MPI's Isend/Irecv; with a device, the
  // staging's enqueue), and the engine's calls (parameter gathers, gradient windows'
  // pages, reductions launched; made from inside forward and backward, so partly within
  // compute_seconds).
  double transfer_seconds = 0, engine_seconds = 0;
  double bubble() const { return wall_seconds > 0 ? 1 - compute_seconds / wall_seconds : 0; }
};

class PipelineExecutor {
 public:
  // `alloc`: the chunks' device's (activations, transfer buffers). `device`: the chunks'
  // device and stream when the transfers are staged (PipeLink), none for host memory.
  PipelineExecutor(const PipelineCut& cut, const ProcessGrid& grid, std::vector<PipelineChunk> chunks,
                   Allocator& alloc, Tracer* tracer = nullptr,
                   std::optional<PipeDevice> device = std::nullopt);
  ~PipelineExecutor();

  // The most micro-batches per step a pipeline of `vstages` virtual stages can tag.
  static int64_t max_micro_batches(int64_t vstages);

  // Plans activations and transfer buffers for `schedule` with micro-batches of up to
  // B x T (OutOfMemory). Again when the schedule changes.
  void plan(const Schedule& schedule, int64_t B, int64_t T);
  const Schedule& schedule() const { return schedule_; }
  // The transfers are staged through host buffers (the chunks run on a device).
  bool staged_transfers() const { return link_->staged(); }
  // Activation slots of each chunk (the schedule's bound).
  const std::vector<int>& slots() const { return slots_; }
  // Bytes of activations, scratch, transfer buffers and a tied gradient's receive buffer planned.
  size_t planned_bytes() const { return planned_bytes_; }
  // What plan(schedule, B, T) would allocate on this rank, without allocating.
  size_t bytes_for(const Schedule& schedule, int64_t B, int64_t T) const;

  // One step: micro-batch mb is batches[mb] (valid for the whole call; tokens read by
  // the first virtual stage, targets by the last, in the memory of the chunks' device).
  // On the rank of the last virtual stage, *loss_sum (memory of that device: a device
  // double on a GPU) += the mean loss of each micro-batch times weights[mb], in order.
  void run(std::span<const Batch> batches, std::span<const double> weights, double* loss_sum);
  const PipelineStepStats& last_step() const { return stats_; }
  // The out-of-memory error that stopped the last step's compute on this rank ("" when
  // none): its remaining actions then ran without compute (their transfers and engine
  // calls only, parallel/pipeline_calls.h), and the step is to be discarded.
  const std::string& failure() const { return failure_; }
  // Forward only through every stage (evaluation); the mean loss on the rank of the last
  // virtual stage, 0 elsewhere.
  double forward_only(const Batch& batch);

 private:
  struct ChunkState;
  void forward(const PipeAction& a, size_t index, std::span<const Batch> batches,
               std::span<const double> weights, double* loss_sum);
  // Whole, B or W; `index` in the list (the chunk's last backward or W is final).
  void backward(const PipeAction& a, size_t index, std::span<const Batch> batches);
  void release_if_done(ChunkState& c, int micro_batch);
  void post_recv(const PipeAction& a, bool grad);
  void send(const PipeAction& a, bool grad);
  StackHooks hooks_for(ChunkState& c, bool final);
  // One engine call of chunk c, counted once made; the calls of list index `index` not
  // made yet, without compute; the step's first out-of-memory error.
  void make_call(ChunkState& c, const EngineCall& call);
  void complete_calls(ChunkState& c, size_t index);
  void fail(const OutOfMemory& e);
  void exchange_tie(ChunkState& c, TieSide& t);
  void finish_ties();
  int tag(int mb, int vstage, bool grad) const;

  const PipelineCut& cut_;
  const ProcessGrid& grid_;
  Allocator& alloc_;
  Tracer* tracer_;
  const DeviceOps& ops_;  // the chunks' device's
  void* stream_;
  std::unique_ptr<PipeLink> link_;  // over the pp group
  std::vector<std::unique_ptr<ChunkState>> chunks_;
  Schedule schedule_;
  std::vector<int> slots_;
  size_t planned_bytes_ = 0;
  PipelineStepStats stats_;
  std::string failure_;
};

}  // namespace etr
