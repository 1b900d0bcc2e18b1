// Allocators with a byte budget (docs/design.md, "Adaptive batch sizing").
//
// Every allocator enforces a budget and throws OutOfMemory (requested, in use, peak,
// budget) instead of letting the process die; on the CPU the budget is how tests reach
// the out-of-memory paths. Buffer is the owning RAII handle the flat buffers use.
#pragma once

#include <cstddef>
#include <utility>

#include "runtime/device.h"
#include "runtime/tensor.h"

namespace etr {

struct MemoryStats {
  size_t in_use = 0;      // bytes handed out and not yet returned
  size_t peak = 0;        // largest in_use since construction or reset_peak()
  size_t reserved = 0;    // bytes held from the system (>= in_use for caching allocators)
  size_t budget = 0;      // allocations beyond this throw OutOfMemory
  size_t allocations = 0; // live allocations
  size_t fragmentation() const { return reserved - in_use; }
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for `bytes` (nullptr for 0); throws OutOfMemory past the budget.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual Device device() const = 0;
  virtual MemoryStats stats() const = 0;
  virtual void set_budget(size_t bytes) = 0;
  virtual void reset_peak() = 0;
  // Gives memory cached for reuse back to the system (after an out-of-memory error);
  // live allocations are untouched. Allocators without a cache do nothing.
  virtual void release_cached() {}
};

// Owns one allocation of an Allocator; move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Allocator& alloc, size_t bytes)
      : alloc_(&alloc), data_(alloc.allocate(bytes)), bytes_(bytes) {}
  Buffer(Buffer&& o) noexcept
      : alloc_(std::exchange(o.alloc_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      alloc_ = std::exchange(o.alloc_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void reset() {
    if (alloc_ && data_) alloc_->deallocate(data_);
    data_ = nullptr;
    bytes_ = 0;
  }
  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  Device device() const { return alloc_ ? alloc_->device() : Device::cpu(); }
  // The whole buffer as a flat view of `dtype` elements.
  TensorView view(DType dtype) const {
    return TensorView::flat(data_, static_cast<int64_t>(bytes_ / dtype_size(dtype)), dtype,
                            device());
  }

 private:
  Allocator* alloc_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// The OutOfMemory exception every allocator throws, with one message format:
// "out of memory on cpu: requested 2 GiB with 1.5 GiB in use (peak 1.7 GiB) under a
//  budget of 3 GiB; ..."
[[noreturn]] void throw_out_of_memory(Device device, size_t requested, const MemoryStats& stats,
                                      const char* hint);

}  // namespace etr
