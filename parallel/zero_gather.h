// The parameter side of ZeRO (parallel/zero_engine.h): gathering parameter buckets from
// the ranks' shards, the layer-by-layer gathering of stage 3 with its prefetch, and the
// redistribution of sharded state into the ranges a checkpoint writer packs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "parallel/zero_plan.h"
#include "runtime/group.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/memory_window.h"
#include "runtime/layer_stack.h"
#include "runtime/log.h"

namespace etr {

// All-gathers parameter buckets: rank r's block of bucket b (at shard(b)) into
// full + bucket.begin, on `comm`'s progress thread. A replicated bucket is copied from
// the rank's own copy. Launches must be made in the same order on every rank.
class ParamGather {
 public:
  // `full` and the shards are on comm's device; `stream`: the rank's (a replicated bucket's
  // copy is enqueued there; nullptr on the host).
  ParamGather(const ZeroPlan& plan, Communicator& comm, float* full,
              std::function<const float*(size_t bucket)> shard, void* stream = nullptr);

  void launch(size_t b);  // no-op when bucket b is in flight or gathered
  void wait(size_t b);    // rethrows a CommError
  void wait_all();
  bool live(size_t b) const { return state_[b] != kNone; }
  // Bucket b's memory is gone (its window pages released): it must be gathered again.
  void forget(size_t b);
  void forget_all();
  // Buckets gathered since construction, and their bytes.
  int64_t gathers() const { return gathers_; }
  int64_t bytes() const { return bytes_; }

 private:
  enum State : uint8_t { kNone, kInFlight, kReady };
  const ZeroPlan& plan_;
  Communicator& comm_;
  float* full_;
  std::function<const float*(size_t)> shard_;
  void* stream_;
  std::vector<WorkPtr> work_;
  std::vector<State> state_;
  int64_t gathers_ = 0, bytes_ = 0;
};

// For each layer of `stack`, the buckets it reads: those its own range touches, and
// those of the parameters it shares (SharedParam::user).
std::vector<std::vector<size_t>> buckets_read_by_layers(const ZeroPlan& plan,
                                                        const LayerStack<float>& stack);

// Stage 3: before each layer's forward and backward, gathers the buckets it reads (its
// own, and those of the parameters it shares, such as GPT-2's tied wte) into the
// parameter window, prefetches those of the next layer in the order recorded in the
// first step (at most `prefetch_bytes` of them, at least one bucket; 0: none), and releases every
// bucket neither needs. A step whose order differs from the recorded one is logged and
// recorded again (never silently mispredicted).
class LayerGatherer {
 public:
  LayerGatherer(const ZeroPlan& plan, const LayerStack<float>& stack, MemoryWindow& window,
                ParamGather& gather, Logger* log, size_t prefetch_bytes);

  void before(bool backward, int layer);
  // The step's passes are over: everything is released; the order is recorded.
  void end_step();
  // Every bucket gathered (materialized parameters) / released. launch_all() starts every
  // bucket's gather and returns (wait for a layer's with ParamGather::wait).
  void gather_all();
  void launch_all();
  void release_all();
  // Times the order changed after it was first recorded.
  int reorders() const { return reorders_; }
  // Layer passes (a forward or a backward) that found some of their buckets already
  // gathered by the previous pass's prefetch.
  int64_t prefetched_passes() const { return prefetched_passes_; }
  // The buckets layer `layer` reads.
  const std::vector<size_t>& needed(int layer) const { return needed_.at(layer); }

 private:
  void acquire_and_launch(size_t b);
  void release(size_t b);

  const ZeroPlan& plan_;
  MemoryWindow& window_;
  ParamGather& gather_;
  Logger* log_;
  std::vector<std::vector<size_t>> needed_;  // per layer
  std::vector<std::vector<size_t>> prefetch_;  // per layer: the part of needed_ prefetched
  std::vector<int> recorded_, current_;      // events: 2 layer + backward
  bool recording_ = true;
  int reorders_ = 0;
  std::vector<uint8_t> by_prefetch_;  // per bucket: launched ahead of the pass that reads it
  int64_t prefetched_passes_ = 0;
};

}  // namespace etr
