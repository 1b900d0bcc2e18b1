// ParamLayout: the layout table of a model's flat buffers (docs/design.md, "Core data
// layout: flat buffers").
//
// A replica (or pipeline stage) keeps its parameters in ONE flat buffer laid out layer
// by layer in forward order; gradients and each optimizer state use the same layout in
// buffers of their own. Each logical tensor is an entry (name, offset, shape, dtype);
// everything else is range arithmetic on the table:
//   - a layer's tensors are one contiguous range (a gradient bucket is a union of them);
//   - a ZeRO shard is the r-th of n equal ranges of the buffer, padded to n;
//   - a checkpoint stores tensors by name with their offsets, so any layout reads any.
// Offsets are aligned to kAlignElements so that every tensor starts on a cache line.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace etr {

struct TensorEntry {
  std::string name;       // "h.0.attn.c_attn.weight"
  int64_t offset = 0;     // elements from the start of the flat buffer
  Shape shape;
  DType dtype = DType::kF32;
  int layer = 0;          // index of the layer that owns it, in forward order
  bool weight_decay = false;  // AdamW decays 2-D weights only
  int64_t numel() const { return shape.numel(); }
};

class ParamLayout {
 public:
  static constexpr int64_t kAlignElements = 16;  // 64 bytes of f32

  // Appends a tensor after the last one. Layers must be added in non-decreasing order;
  // names must be unique. Returns the entry's index.
  size_t add(std::string name, Shape shape, int layer, bool weight_decay,
             DType dtype = DType::kF32);

  std::span<const TensorEntry> entries() const { return entries_; }
  const TensorEntry& at(size_t i) const { return entries_.at(i); }
  // nullptr when there is no such tensor.
  const TensorEntry* find(std::string_view name) const;
  // Elements of the flat buffer, padding included.
  int64_t numel() const { return numel_; }
  // Elements that belong to tensors (no padding).
  int64_t param_count() const;
  int num_layers() const { return entries_.empty() ? 0 : entries_.back().layer + 1; }

  // [begin, end) elements of layer `layer`'s tensors (empty range for a layer with none).
  std::pair<int64_t, int64_t> layer_range(int layer) const;
  // [begin, end) of shard r of n: equal ranges of the buffer padded to a multiple of n.
  std::pair<int64_t, int64_t> shard_range(int r, int n) const;
  // Elements of a buffer that holds n equal shards (numel() rounded up to n).
  int64_t padded_numel(int n) const;

  // Entry i as a view into a flat buffer that starts at `base`.
  TensorView view(void* base, size_t i, Device device = Device::cpu()) const;

 private:
  std::vector<TensorEntry> entries_;
  // name -> index into entries_: add() and find() in O(1), so a model of 10^5 layers is
  // laid out in linear time (a scan per add was quadratic).
  std::unordered_map<std::string, size_t> index_;
  int64_t numel_ = 0;
};

}  // namespace etr
