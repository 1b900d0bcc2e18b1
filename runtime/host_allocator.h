// HostAllocator: aligned host memory under a byte budget.
//
// Alignment is 64 bytes (a cache line; every SIMD width); allocations of 2 MiB and more
// are aligned to 2 MiB and advised for transparent huge pages, which makes first touch
// several times faster on these VMs (docs/machine_notes.md). Thread-safe.
//
// Caching: a freed allocation of 2 MiB or more is kept (stats().reserved, not in_use)
// and handed out again for a request of the same size, so buffers given back at the end
// of a step and taken again at the start of the next (the activations: the batch policy,
// parallel/batch_policy.h) cost no page faults. The budget limits in_use; the cache is
// returned to the system when the budget falls below what is reserved (set_budget) and
// before a new block would take reserved past it, and by trim().
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "runtime/allocator.h"

namespace etr {

class HostAllocator final : public Allocator {
 public:
  // budget 0 means: the machine's available memory at construction (MemAvailable),
  // or ETR_HOST_MEMORY_BUDGET (e.g. "8GiB") when it is set.
  explicit HostAllocator(size_t budget = 0);
  ~HostAllocator() override;

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  Device device() const override { return Device::cpu(); }
  MemoryStats stats() const override;
  void set_budget(size_t bytes) override;
  void reset_peak() override;
  // Returns every cached block to the system.
  void trim();

  // Memory taken outside allocate() (a HostWindow's pages) counted against the budget:
  // charge throws OutOfMemory past it; discharge returns what was charged.
  void charge(size_t bytes);
  void discharge(size_t bytes);

  // Tests of out-of-memory recovery: every allocate() of at least a byte and every charge()
  // is an allocation event (events() counts them); after fail_event(n), the n-th event
  // from now (n >= 1) throws OutOfMemory as a refused request does, once.
  uint64_t events() const;
  void fail_event(uint64_t n);

  static constexpr size_t kAlignment = 64;
  static constexpr size_t kHugeAlignment = size_t{2} << 20;

 private:
  mutable std::mutex mutex_;
  void trim_to(size_t reserved);  // with mutex_ held: frees cached blocks until reserved <= it
  static void* map_block(size_t bytes);                // >= kHugeAlignment; nullptr on failure
  static void release_block(void* ptr, size_t bytes);  // munmap or free, by size
  std::unordered_map<void*, size_t> sizes_;
  std::unordered_multimap<size_t, void*> cache_;  // freed blocks >= kHugeAlignment, by size
  // with mutex_ held: one more event, or the injected failure
  void count_event_locked(size_t bytes);
  MemoryStats stats_;
  uint64_t events_ = 0;
  uint64_t fail_at_ = 0;  // the event that fails (0: none)
};

// Bytes the kernel reports as available (MemAvailable in /proc/meminfo).
size_t host_available_memory();

}  // namespace etr
