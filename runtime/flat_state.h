// FlatState: the named flat buffers of one ParamLayout and the ranges of it this rank
// holds (docs/design.md, "The training engine": the state seam).
//
// Every state of a job ("param", "grad", "adam.m", "adam.v"; runtime/state_names.h) is a
// flat buffer with the layout's offsets. A rank holds some ranges of the layout:
//
//   all of it      [0, numel)                 data parallelism (every replica)
//   a ZeRO shard   [numel r / N, ...)         one range of the padded buffer
//   bucket slices  several ranges             the pieces of a bucket plan a rank owns
//
// and each state's storage is those ranges back to back (held_numel() elements), so
// memory is what the rank holds, never the whole layout unless it holds it all. Layers
// bind to storage that holds all of the layout (holds_all()); the optimizer updates a
// held range given the storage of that range only (range()); checkpoints save what is
// held and load any holding from any other, by layout offsets (checkpoint/).
//
//   FlatState s(layout, alloc);              // holds everything
//   s.add(state::kParam); s.add(state::kGrad);
//   float* p = s.data<float>(state::kParam);  // element i is layout element i
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/param_layout.h"

namespace etr {

// [begin, end) elements of a layout's flat buffer.
struct HeldRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t numel() const { return end - begin; }
  bool operator==(const HeldRange&) const = default;
};

class FlatState {
 public:
  // Holds `held` (sorted, disjoint, non-empty ranges within [0, layout.padded_numel(1)));
  // empty `held` means all of [0, layout.numel()). InvalidArgument otherwise. The layout
  // and the allocator must outlive the state. The storage is on the allocator's device
  // (host memory, or a GPU's: device_ops(device()) works on it).
  FlatState(const ParamLayout& layout, Allocator& alloc, std::vector<HeldRange> held = {},
            DType dtype = DType::kF32);
  FlatState(const FlatState&) = delete;
  FlatState& operator=(const FlatState&) = delete;

  const ParamLayout& layout() const { return layout_; }
  DType dtype() const { return dtype_; }  // of the states added without one
  Device device() const { return device_; }
  std::span<const HeldRange> held() const { return held_; }
  // Elements held (the sum of the ranges): each state's storage.
  int64_t held_numel() const { return held_numel_; }
  bool holds_all() const;

  // Adds a state of held_numel() elements of dtype() (or of `dtype`: mixed precision's
  // bf16 parameter copy beside f32 states), zeroed (OutOfMemory from the allocator).
  // InvalidArgument when `name` is there already.
  void add(std::string_view name);
  void add(std::string_view name, DType dtype);
  bool has(std::string_view name) const;
  // The element type of state `name` (InvalidArgument when there is none).
  DType dtype(std::string_view name) const;
  // Names in the order they were added.
  std::vector<std::string> names() const;

  // The storage of state `name`: the held ranges back to back. InvalidArgument when there
  // is no such state, or when T is not the state's element type.
  template <typename T>
  T* data(std::string_view name) {
    return static_cast<T*>(raw(name, sizeof(T)));
  }
  template <typename T>
  const T* data(std::string_view name) const {
    return static_cast<const T*>(const_cast<FlatState*>(this)->raw(name, sizeof(T)));
  }
  // The storage of held range `i` of state `name` (its first element is layout element
  // held()[i].begin).
  template <typename T>
  T* range(std::string_view name, size_t i) {
    return data<T>(name) + range_offset(i);
  }
  // Where held range i starts in each state's storage.
  int64_t range_offset(size_t i) const { return offsets_.at(i); }
  // Zeroes state `name` (on its device; done when it returns).
  void zero(std::string_view name);
  // Bytes of every state together.
  size_t bytes() const;

 private:
  void* raw(std::string_view name, size_t element_bytes);
  struct Named {
    std::string name;
    DType dtype;
    Buffer buffer;
  };
  Named& find(std::string_view name);
  const ParamLayout& layout_;
  Allocator& alloc_;
  DType dtype_;
  Device device_;
  std::vector<HeldRange> held_;
  std::vector<int64_t> offsets_;
  int64_t held_numel_ = 0;
  std::vector<Named> states_;
};

}  // namespace etr
