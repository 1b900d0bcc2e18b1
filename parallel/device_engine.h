// DeviceEngine: data parallelism (ZeRO stage 0) with the state on the device of its
// allocator: a GPU's memory (runtime.device = cuda) or the host's. Every rank holds all of
// the layout, and everything a step does to the state runs on that device through the
// dispatch's device operations (runtime/kernels/device_ops.h), enqueued on the rank's
// stream:
//
//   begin_step       gradients zeroed on the device
//   backward         on several ranks a BucketReducer sums the device gradients bucket by
//                    bucket as backward makes them final, over the device communicator:
//                    NCCL (options.nccl; each bucket on NCCL's stream after an event of
//                    the compute stream) or the staged one (collectives/staged_communicator.h:
//                    each bucket copied to the host after an event of the compute stream,
//                    summed by the host's ring, copied back on a stream of its own; any
//                    number of ranks per GPU). Backward never waits; end_backward() waits
//                    for the last bucket. Either way the buckets and their sums are
//                    DataParallelEngine's on the host, and ReduceStats means the same:
//                    comm = the buckets' time on their stream or through the host, exposed
//                    = the wait in end_backward()
//   grad_norm        the squared norm into a device scalar, read once (the step's only
//                    wait for the device; the loop's loss copy, enqueued before, rides on
//                    it); the summed gradients are the same bits on every rank, so are
//                    the norm, the clipping and the update
//   optimizer_step   clipping by the device's norm (by the step's from the host when it is
//                    another: a pipeline's, over every stage), then AdamW over the layout
//
// State (FlatState on the allocator's device): param, grad, adam.m, adam.v [numel] f32;
// under mixed precision (a bf16 stack) also param.bf16 [numel] bf16, never saved.
// The host sees it only through copies: states() downloads param, adam.m and adam.v into
// a page-locked host mirror for a checkpoint (valid until the next step, as the Engine contract says),
// held_states() gives that mirror to a restore and restored() uploads it, and parameters()
// downloads the parameters for an export. A checkpoint is therefore the same bytes,
// whichever device wrote it, and loads on either.
//
// On the host (Device::cpu()) the same engine runs with host memory and the host's
// operations: the tests here check it against the optimizer's parts on one rank and
// against DataParallelEngine on 2-4 ranks.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "parallel/data_parallel_engine.h"
#include "parallel/engine.h"
#include "parallel/bucket_reducer.h"
#include "parallel/local_norm.h"
#include "runtime/pinned_allocator.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/state_names.h"

namespace etr {

class DeviceEngine final : public Engine {
 public:
  // Allocates the state from `alloc` (its device; OutOfMemory) and binds `stack` to it.
  // `stream`: the rank's stream (DeviceContext::stream(); nullptr on the host). Collective
  // over grid->dp_group() when it has more than one rank (null `grid`: one rank).
  // A LayerStack<bf16> trains in mixed precision: the state gains "param.bf16"
  // (state::kParamBf16, what the stack computes with), written from the f32 master after
  // the parameters are set or restored and by every AdamW step in the same pass.
  template <typename Real>
  DeviceEngine(LayerStack<Real>& stack, Allocator& alloc, void* stream,
               DataParallelOptions options, const ProcessGrid* grid = nullptr,
               Tracer* tracer = nullptr);
  ~DeviceEngine() override;

  Device device() const { return state_.device(); }
  bool mixed_precision() const { return mixed_; }
  int zero_stage() const override { return 0; }
  const BucketReducer* reducer() const override { return reducer_.get(); }
  // The gradient communicator: NCCL's, or the staged one; null on one rank without NCCL.
  Communicator* device_communicator() { return device_comm_.get(); }
  bool nccl() const { return options_.nccl && device_comm_ != nullptr; }
  // This rank's gradient norm before the sums, bucket by bucket on the device (read, with a
  // wait for the stream, by local_grad_sq_norm()).
  void measure_local_norm(bool on) override {
    if (local_norm_) local_norm_->measure(on);
  }
  double local_grad_sq_norm() const override { return local_norm_ ? local_norm_->read() : std::nan(""); }
  FlatState& state() override { return state_; }
  void initialize_parameters(const std::function<void(const ParamLayout&, float*)>& init) override;
  // A host copy of the parameters (downloaded by this call; the device's own storage on
  // the host), valid until the next call or step.
  float* parameters() override;
  // The device's gradient buffer (device memory on a GPU).
  float* gradients() override { return grads(); }
  std::vector<HeldState> held_states() override;
  void restored() override;
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
  float* grads() { return state_.data<float>(etr::state::kGrad); }
  // The host mirror of param, adam.m and adam.v, made on first use (on the host too, so
  // that the copies a GPU makes run, and are tested, on the host alike).
  FlatState& host_mirror();
  // Mixed precision: the bf16 copy from the f32 parameters (enqueued).
  void refresh_bf16();
  const DeviceOps& ops_;
  const ParamLayout& layout_;
  bool mixed_ = false;
  void* stream_;
  DataParallelOptions options_;
  int ranks_ = 1;
  FlatState state_;
  Buffer norm_sq_;          // one double on the device
  PinnedBuffer norm_host_;  // its copy
  double norm_ = std::nan("");  // what grad_norm() returned last
  PinnedHostAllocator host_alloc_;  // the mirror: page-locked where there is a GPU
  std::unique_ptr<FlatState> mirror_;
  std::unique_ptr<HostCommunicator> comm_;  // several ranks: the broadcast's (and the staged sums')
  // The gradients' communicator: NCCL on the device (options.nccl: each bucket on NCCL's
  // stream after an event of the compute stream), or staged through comm_
  // (collectives/staged_communicator.h); the BucketReducer's buckets go through it.
  std::unique_ptr<Communicator> device_comm_;
  std::unique_ptr<BucketReducer> reducer_;
  std::unique_ptr<LocalNormMeter> local_norm_;
};

}  // namespace etr
