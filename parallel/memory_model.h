// MemoryModel: the peak bytes a rank's allocator holds during a training step, as a function
// of its micro-batch b (docs/design.md, "Adaptive batch sizing"; the batch policy's first part).
//
// The peak is a sum of parts, each known before the step runs:
//   - the engine's state at its ZeRO stage: parameters, gradients, AdamW moments (replicas or
//     shards; parallel/engine.h EngineMemory), independent of b;
//   - at ZeRO 2-3, the windows of gradients not reduced yet and of gathered parameters
//     (bounded by the bucket and prefetch sizes, in whole pages; the whole gradient window
//     while a step accumulates more than one micro-batch, so these depend on b);
//   - checkpoint staging (the buffers a save gathers into), independent of b;
//   - the activations of b x T: every layer's stored activations and the backward's scratch
//     (LayerStack::activation_bytes, exact), or with a pipeline the schedule's in-flight
//     micro-batches and receive pools (PipelineExecutor), with or without activation
//     recomputation.
// What the allocator does not hold (the binary, MPI and its buffers, the collectives' own
// scratch, the data) is the budget's business (runtime/memory_budget.h subtracts it).
//
//   MemoryModel m(fixed_parts, [&](int64_t b, bool rc) { return stack.activation_bytes(...); });
//   m.peak(4, false);                          // bytes at b = 4
//   m.largest_fitting(budget, 0.1, 64, false);  // the largest b <= 64 under 90 % of budget
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace etr {

struct MemoryPart {
  std::string name;  // "parameters", "activations", ...
  size_t bytes = 0;
};

class MemoryModel {
 public:
  using ActivationBytes = std::function<size_t(int64_t b, bool recompute)>;
  // Parts besides the activations that depend on b (ZeRO 2-3's gradient window holds every
  // gradient while a step accumulates more than one micro-batch).
  using VariableParts = std::function<std::vector<MemoryPart>(int64_t b)>;
  MemoryModel() = default;
  MemoryModel(std::vector<MemoryPart> fixed, ActivationBytes activations,
              VariableParts variable = nullptr);

  // Every part at micro-batch b, the activations last.
  std::vector<MemoryPart> parts(int64_t b, bool recompute) const;
  size_t peak(int64_t b, bool recompute) const;
  // The parts that do not depend on b, summed.
  size_t fixed_bytes() const {
    size_t n = 0;
    for (const MemoryPart& p : fixed_) n += p.bytes;
    return n;
  }
  // The part with the most bytes at b ("activations", "optimizer state", ...).
  std::string dominant(int64_t b, bool recompute) const;
  // The largest b in [1, max_b] with peak(b) <= (1 - margin) x budget; 0 when not even
  // b = 1 fits. The peak grows with b, so a binary search finds it.
  int64_t largest_fitting(size_t budget, double margin, int64_t max_b, bool recompute) const;
  // The lines `etr-train --plan` prints: each part, then the peak for b = 1, 2, 4, ... up
  // to the first that does not fit (and max_b), the largest b that fits, with and without
  // recomputation when `can_recompute`.
  std::vector<std::string> plan_table(size_t budget, double margin, int64_t max_b,
                                      bool can_recompute) const;

 private:
  std::vector<MemoryPart> fixed_;
  ActivationBytes activations_;
  VariableParts variable_;
};

}  // namespace etr
