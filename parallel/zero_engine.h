// ZeroEngine: ZeRO stages 1-3 (Rajbhandari et al.): each of the N data-parallel ranks
// keeps a shard of the state, and trains bitwise like the data-parallel engine (stage 0)
// on the same N ranks (parallel/zero_plan.h explains why the sums agree).
//
// What rank r keeps (fp32 AdamW, Psi parameters):
//
//   stage  parameters           gradients                 adam.m, adam.v   paper
//   1      all (4 Psi)          all (4 Psi)               shard (8 Psi/N)  8 Psi + 8 Psi/N
//   2      all                  shard + window            shard            4 Psi + 12 Psi/N
//   3      shard + window       shard + window            shard            16 Psi/N
//
// "shard" = rank r's block of every gradient bucket (ZeroPlan::held(r)); "window" = a
// HostWindow of the whole layout whose pages exist only while a bucket is in use.
//
// One step:
//   backward    buckets reduce-scattered in order while backward runs (the bucket
//               reducer of data parallelism); rank r's block lands in its gradient shard
//               (stage 1: in place); at stages 2-3 a bucket's gradient pages are freed
//               once it is reduced. Accumulation: only the last micro-batch communicates
//               and the full gradients are kept until then (so the result is stage 0's
//               bitwise; the cost: at stages 2-3 the gradient window grows to 4 Psi
//               during an accumulating step), unless set_reduce_each_micro_batch(true)
//               (the session's choice when 4 Psi does not fit): then every micro-batch
//               reduce-scatters into the shard (within rounding of stage 0), and
//               when every layer writes its gradients through a GradSink
//               (runtime/grad_sink.h) they are blocked (below)
//   norm        each rank's partial over its shard, all-gathered, added in rank order
//   update      AdamW on the shard
//   parameters  stages 1-2: each bucket all-gathered in place after the update, in the
//               order the next forward reads them, waited for by the layer that needs
//               it (overlapped with the next step's forward). Stage 3: gathered into
//               the window before each layer's forward and again before its backward,
//               the next layer's prefetched in the recorded order, freed after use
//               (LayerGatherer)
//
// The small replicated tail of the plan (< 16 N elements) is held whole by every rank,
// allreduced and updated by all.
//
// Blocked gradients (reducing each micro-batch, when stack.grads_through_sink()): the
// engine is the layers' GradSink. A layer's backward hands each gradient over a block of
// rows at a time (the rows whose last element lies in one bucket), highest offsets first;
// before a block the engine waits for the oldest reductions while the window holds more
// than one bucket (blocked_window_cap) and takes the pages the block writes; after it,
// every bucket at or above the block's first element is final and launched
// (BucketReducer::ready_from). A tensor the layer does not own (the LM head's part of the
// tied wte) is reduced apart, bucket by bucket as its blocks complete
// (BucketReducer::reduce_apart: the shard's sum so far added first, as for every bucket),
// its window range zeroed and released: the embedding's part comes later through the
// step's buckets. So the unreduced gradients alive at any moment are a bucket in flight
// and a block (a bucket and a row): the window no longer holds a layer. Host only: the
// device path reduces once a step (set_reduce_each_micro_batch is off there, as before)
// and the CUDA kernel sets have no blocked kernels yet.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallel/data_parallel_engine.h"
#include "parallel/local_norm.h"
#include "parallel/zero_gather.h"
#include "parallel/zero_plan.h"
#include "runtime/host_allocator.h"
#include "runtime/grad_sink.h"
#include "runtime/host_window.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/memory_window.h"
#include "runtime/pinned_allocator.h"
#include "runtime/log.h"

namespace etr {

struct ZeroOptions {
  int stage = 1;  // 1, 2 or 3
  DataParallelOptions dp;
  Logger* log = nullptr;  // stage 3's order changes
  // Stage 3: bytes of the next layer's buckets gathered ahead (at least one bucket; 0:
  // no prefetch).
  size_t prefetch_bytes = size_t{1} << 20;
  // The device path on host memory (tests): whole windows, the staged communicators over
  // a host copier, host copies for checkpoints, as on a GPU. On a GPU it is the only path.
  bool staged = false;
  // Stage 3: gather every parameter bucket once per step (launched at begin_step, each
  // layer waits for its own) and hold them until end_backward, instead of layer by layer
  // before each forward and backward. A pipeline stage runs every micro-batch's forward
  // and backward within the step, so this gathers once what it would gather 2 m times;
  // the state (gradients and optimizer) stays sharded, the parameters are whole during
  // the step and sharded between steps (and in checkpoints).
  bool gather_once_per_step = false;
};

class ZeroEngine final : public Engine, private GradSink {
 public:
  // Collective over grid.dp_group(). InvalidArgument for a stage outside 1-3; ConfigError
  // when the layout cannot be sharded over the ranks (no bucket to split). OutOfMemory
  // from `alloc`, whose device holds the state: the host's (a HostAllocator: paged
  // windows, host communicators) or a GPU's (the device path: whole windows, the
  // gradients' and parameters' communicators staged through the host or NCCL's,
  // options.dp.nccl; everything a step does to the state enqueued on `stream`; host copies
  // for checkpoints, exports and restores).
  ZeroEngine(LayerStack<float>& stack, const ProcessGrid& grid, Allocator& alloc,
             ZeroOptions options, Tracer* tracer = nullptr, void* stream = nullptr);
  ~ZeroEngine() override;

  const ZeroPlan& plan() const { return plan_; }
  const BucketReducer* reducer() const override { return reducer_.get(); }
  void measure_local_norm(bool on) override {
    if (local_norm_) return local_norm_->measure(on);
    if (reducer_) reducer_->measure_local_norm(on);
  }
  double local_grad_sq_norm() const override {
    if (local_norm_) return local_norm_->read();
    return reducer_ ? reducer_->local_sq_norm() : std::nan("");
  }
  // Stage 3's gatherer (null below): its recorded order and reorders.
  const LayerGatherer* gatherer() const { return layers_.get(); }
  // Parameter bytes all-gathered since construction.
  int64_t gathered_bytes() const { return gather_->bytes(); }
  // The most bytes one layer's forward or backward gathers (its buckets, stage 3).
  size_t largest_layer_bytes() const;
  size_t grad_window_cap() const;  // the held gradient bytes backward waits to come under

  int zero_stage() const override { return options_.stage; }
  FlatState& state() override { return shard_; }
  void initialize_parameters(const std::function<void(const ParamLayout&, float*)>& init) override;
  float* parameters() override;
  void materialize_parameters() override;
  void release_parameters() override {
    if (layers_) layers_->release_all();
  }
  // Stages 2-3 accumulating several micro-batches: reduce-scatter each micro-batch's
  // gradients into the shard (on) — the gradient window stays a layer and two buckets, the
  // shard accumulates: before a bucket's reduce-scatter this rank adds its shard's block to
  // its own contribution of that block (rank 0 adds the replicated tail), so the sum lands
  // in the shard — or keep the whole window until the last micro-batch (off: one reduction
  // a step, stage 0's summation order, 4 Psi of window while accumulating). The session's
  // memory model decides between steps (fit first, then speed). Host memory only.
  void set_reduce_each_micro_batch(bool on);
  bool reduces_each_micro_batch() const { return each_; }
  // Reducing each micro-batch with blocked gradients (the layers write through the sink).
  bool blocks_gradients() const { return blocked_; }
  // Whether reducing each micro-batch (`each`) would block the gradients here.
  bool blocks_gradients_if(bool each) const {
    return each && options_.stage >= 2 && !device_path_ && stack_.grads_through_sink();
  }
  // Blocked: backward waits for reductions while the window holds more than this.
  size_t blocked_window_cap() const { return options_.dp.buckets.bucket_cap_bytes; }
  // Blocked: the most bytes of buckets one block's pages take (a bucket and a row below it).
  size_t largest_block_bytes() const;
  // predicted_windows() for either choice.
  WindowBytes predicted_windows_if(int micro_batches, bool each) const;
  // Bytes of gathered parameters held now (stage 3's window; 0 below).
  size_t gathered_resident_bytes() const { return param_window_ ? param_window_->resident_bytes() : 0; }
  float* gradients() override { return full_grads_; }
  std::vector<HeldState> held_states() override;
  void gather_state(std::string_view name, float* out) override;
  EngineMemory memory() const override;
  WindowBytes predicted_windows(int micro_batches) const override;
  std::string describe() const override;

  void begin_step() override;
  void finish_begin_step() override;
  void begin_backward(bool last) override;
  void before_forward(int layer) override;
  void before_backward(int layer) override;
  void layer_grads_final(int layer) override;
  ReduceStats end_backward() override;
  std::vector<GradRange> reduced_gradients(bool owned) override;
  void restored() override;
  double grad_norm() override;
  void optimizer_step(const OptimizerStep& step) override;
  std::vector<NamedState> states() override;
  std::shared_ptr<const ShardOwners> checkpoint_owners() override;  // its block of every bucket

 private:
  void build_storage();
  void add_optimizer_states();  // adam.m, adam.v (+ the gradient shard at stages 2-3)
  void build_communication(Tracer* tracer);
  float* held(std::string_view state, size_t bucket);  // this rank's block of a bucket
  size_t index_of(const HeldRange& r) const;  // of a held range in shard_.held()
  float* grad_of(const HeldRange& r);
  float* param_of(const HeldRange& r);
  void reduced(size_t bucket);
  // GradSink (zero_blocks.cc): a layer's gradient handed over in blocks of rows.
  void rows(const void* grad, int64_t rows, int64_t cols, const Compute& compute) override;
  size_t bucket_of(int64_t element) const;  // the bucket holding element `element`
  // The window takes the pages of the buckets touching [begin, end), after waiting for the
  // oldest reductions while it holds more than blocked_window_cap().
  void hold(int64_t begin, int64_t end);
  void acquire_bucket(size_t bucket);
  void reduce_apart(size_t bucket);  // a shared tensor's share of a bucket, now
  // After layer `layer`'s backward: every bucket of the tensors it shares that its blocks
  // would have reduced apart and did not (a rank whose compute failed part-way makes the
  // same collectives as its peers: EngineCallLog).
  void finish_shared(int layer);
  bool reducible_apart(size_t bucket) const {
    return !apart_done_[bucket] && plan_.buckets()[bucket].end <= final_from_;
  }
  void launch_parameter_gathers();
  std::unique_ptr<MemoryWindow> make_window(const char* name, size_t page_bytes);
  Communicator& grad_comm() { return grad_dev_ ? *grad_dev_ : *grad_comm_; }
  Communicator& param_comm() { return param_dev_ ? *param_dev_ : *param_comm_; }
  // The device path's host copies: of the shard (param at stage 3, adam.m, adam.v) and of
  // the whole parameters (stages 1-2); downloaded by download_mirror().
  FlatState& mirror_shard();
  FlatState& mirror_replica();
  void download_mirror(std::string_view state);
  // Where the host reads bucket b's block of `state`: the shard itself, or its mirror.
  const float* host_held(std::string_view state, size_t bucket);

  LayerStack<float>& stack_;
  const ProcessGrid& grid_;
  Allocator& alloc_;
  HostAllocator* host_alloc_;  // alloc_ when the state is on the host and paged
  ZeroOptions options_;
  const DeviceOps& ops_;
  void* stream_;
  bool device_path_;
  ZeroPlan plan_;
  FlatState shard_;                      // this rank's blocks: m, v (+ grad, + param)
  std::optional<FlatState> replica_;     // stages 1-2: param (+ grad at stage 1), whole
  std::unique_ptr<MemoryWindow> grad_window_, param_window_;  // stages 2-3 / 3
  float* full_params_ = nullptr;         // what the layers read
  float* full_grads_ = nullptr;          // what the layers write
  std::vector<size_t> held_index_;       // bucket -> index of its block in shard_.held()
  bool each_ = false;                    // set_reduce_each_micro_batch
  bool blocked_ = false;                 // each_ with blocked gradients
  int64_t final_from_ = 0;               // blocked: the elements at and above it are final
  int current_layer_ = 0;                // the layer whose backward runs
  std::vector<uint8_t> apart_done_;      // blocked: bucket reduced apart this micro-batch
  ReduceStats earlier_;                  // this step's micro-batches reduced before the last
  std::vector<uint8_t> grad_held_;       // stages 2-3: bucket's gradient pages acquired
  size_t grad_held_bytes_ = 0;           // their bytes
  size_t grad_page_ = 0;                 // the gradient window's own page (blocked: the system's)
  std::vector<std::vector<size_t>> needed_;  // per layer: the buckets it reads and writes
  std::unique_ptr<HostCommunicator> grad_comm_, param_comm_;
  std::unique_ptr<Communicator> grad_dev_, param_dev_;  // the device path's
  Buffer norm_slots_;        // [norm ranges] doubles on the state's device
  PinnedBuffer norm_host_;   // their copy
  PinnedHostAllocator mirror_alloc_;
  std::unique_ptr<FlatState> mirror_shard_, mirror_replica_;
  std::vector<float> host_params_;  // the device path's parameters() copy
  std::unique_ptr<BucketReducer> reducer_;
  std::unique_ptr<LocalNormMeter> local_norm_;  // the device path's
  std::unique_ptr<ParamGather> gather_;
  std::unique_ptr<LayerGatherer> layers_;
  std::shared_ptr<const ShardOwners> owners_;  // checkpoint: what each rank writes (states())
};

}  // namespace etr
