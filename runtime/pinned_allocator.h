// PinnedHostAllocator: page-locked host memory (cudaMallocHost in a CUDA build, when the
// process sees a GPU; plain heap memory otherwise) for host copies of device state that
// are copied to and from a GPU in bulk (DeviceEngine's checkpoint mirror): the copies run
// at the bus's speed and asynchronously. No budget of its own beyond `budget` (0: none);
// OutOfMemory when the system refuses. Thread-safe.
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>

#include "runtime/allocator.h"

namespace etr {

class PinnedHostAllocator final : public Allocator {
 public:
  explicit PinnedHostAllocator(size_t budget = 0);
  ~PinnedHostAllocator() override;
  PinnedHostAllocator(const PinnedHostAllocator&) = delete;
  PinnedHostAllocator& operator=(const PinnedHostAllocator&) = delete;

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  Device device() const override { return Device::cpu(); }
  MemoryStats stats() const override;
  void set_budget(size_t bytes) override;
  void reset_peak() override;
  // Whether allocations are page-locked (false without CUDA or a GPU).
  bool pinned() const { return pinned_; }

 private:
  bool pinned_ = false;
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> live_;
  MemoryStats stats_;
};

}  // namespace etr
