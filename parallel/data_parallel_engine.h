// DataParallelEngine: every rank holds all of the flat state (a replica) and gradients are
// summed over the data-parallel ranks in buckets while backward runs (BucketReducer), then
// every rank takes the same AdamW step on the same gradients, so the replicas stay equal
// (docs/design.md, "Execution of one optimizer step"; parallel/engine.h has the protocol).
//
// State (FlatState, all of the layout on every rank):
//   param, grad, adam.m, adam.v   [layout.numel()] f32 each
// Gradients must be scaled by 1 / (tokens in the global batch) by the loss, so that their
// sum over the ranks is the gradient of the mean loss over the global batch.
//
// The buckets are cut for the ranks as ZeRO cuts them (parallel/zero_plan.h) and always
// allreduced by the ring, and the gradient norm is summed as ZeRO sums it, so that every
// ZeRO stage trains bitwise like this engine on the same number of ranks.
//
// The gradient communicator never runs a bucket on the caller's thread (inline_bytes = 0)
// and, while it waits for a peer, spins briefly and then sleeps rather than yields: its
// progress thread shares the cores with backward (measured with etr-bench dp,
// docs/architecture.md). On one rank there is no communication at all.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/comm_options.h"
#include "collectives/host_communicator.h"
#include "parallel/bucket_reducer.h"
#include "parallel/engine.h"
#include "parallel/process_grid.h"
#include "parallel/zero_plan.h"
#include "runtime/adamw.h"
#include "runtime/trace.h"

namespace etr {

struct DataParallelOptions {
  BucketOptions buckets;
  CommOptions comm;  // of the gradient communicator (the defaults above are filled in)
  AdamWOptions adamw;
  // Elements [0, norm_begin) of the layout are left out of grad_norm(): a pipeline
  // stage's borrowed copies of tied parameters (their owner's stage counts them).
  int64_t norm_begin = 0;
  // DeviceEngine on GPUs: sum the gradients with NCCL on the device (TrainSession's
  // choice from comm.device_backend), else through the host (the staged reducer).
  bool nccl = false;
};

// The gradient communicator's options: `o` with the defaults above filled in where it
// leaves them to the engine (shared with the ZeRO engine).
CommOptions gradient_comm_options(CommOptions o);

// What a replica holds (ZeRO stage 0 on `ranks` ranks): parameters, gradients and AdamW's
// m and v, `held_numel` f32 each (DataParallelEngine's and DeviceEngine's memory()).
EngineMemory replica_memory(const ParamLayout& layout, int64_t held_numel, int ranks);

class DataParallelEngine final : public Engine {
 public:
  // Collective over grid.dp_group() when it has more than one rank. Allocates the state
  // from `alloc` (OutOfMemory) and binds `stack` to it; parameters start at 0 until the
  // caller initialises them (state().data<float>(state::kParam)) and calls
  // broadcast_parameters().
  DataParallelEngine(LayerStack<float>& stack, const ProcessGrid& grid, Allocator& alloc,
                     DataParallelOptions options, Tracer* tracer = nullptr);
  ~DataParallelEngine() override;

  // Collective: every rank's parameters become rank 0's, so the replicas start equal.
  void broadcast_parameters();
  const BucketReducer* reducer() const override { return reducer_.get(); }
  void measure_local_norm(bool on) override {
    if (reducer_) reducer_->measure_local_norm(on);
  }
  double local_grad_sq_norm() const override {
    return reducer_ ? reducer_->local_sq_norm() : std::nan("");
  }

  int zero_stage() const override { return 0; }
  FlatState& state() override { return state_; }
  void initialize_parameters(const std::function<void(const ParamLayout&, float*)>& init) override;
  float* parameters() override;
  float* gradients() override { return grads(); }
  std::vector<HeldState> held_states() override;
  void gather_state(std::string_view name, float* out) override;
  EngineMemory memory() const override;
  std::string describe() const override;
  void begin_step() override;
  void begin_backward(bool last) override;
  void layer_grads_final(int layer) override;
  ReduceStats end_backward() override;
  std::vector<GradRange> reduced_gradients(bool owned) override;
  double grad_norm() override;
  void optimizer_step(const OptimizerStep& step) override;
  std::vector<NamedState> states() override;

 private:
  float* grads();
  LayerStack<float>& stack_;
  const ProcessGrid& grid_;
  FlatState state_;
  AdamW adamw_;
  DataParallelOptions options_;
  ZeroPlan plan_;
  std::unique_ptr<HostCommunicator> comm_;
  std::unique_ptr<BucketReducer> reducer_;
};

}  // namespace etr
