// CudaCachingAllocator: device memory of one CUDA device under a byte budget, with a
// cache of freed blocks so that a training step does not pay for cudaMalloc/cudaFree
// (cudaFree synchronises the whole device) on every iteration.
//
//   CudaCachingAllocator alloc(/*device=*/0);      // budget: free memory right now
//   Buffer grads(alloc, n * sizeof(float));        // rounded up, cached when freed
//
// Blocks: every request is rounded up (below 1 MiB to a multiple of 512 B; from 1 MiB
// on to a multiple of 2 MiB) and served by one whole cudaMalloc'd block; blocks are
// never split or merged. A freed block goes to a free list ordered by size; a later
// request takes the smallest cached block that holds its rounded size and wastes at
// most a quarter of the block (best fit), else it cudaMallocs a fresh block.
//
// Stats (MemoryStats): in_use = sum of ROUNDED sizes of live allocations (what the
// budget is checked against: in_use + rounded request <= budget); reserved = bytes held
// from cudaMalloc (live blocks + cached free blocks); fragmentation() = reserved - in_use
// = cached free bytes + the slack of live blocks larger than their rounded request.
// Before a fresh cudaMalloc would take reserved past the budget, the cache is released
// first, so reserved stays within the budget whenever the live blocks allow it.
//
// Out of memory: past the budget, or when cudaMalloc fails after the cache has been
// released and the call retried once, allocate() throws OutOfMemory with the numbers.
//
// Streams: the allocator does not track streams. A block handed to deallocate() may be
// given out again at once, so the caller must first make sure that no queued kernel
// still uses it (synchronise, or keep all users on one stream). Thread-safe.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>

#include "runtime/allocator.h"

namespace etr {

class CudaCachingAllocator final : public Allocator {
 public:
  // budget 0 means: ETR_CUDA_MEMORY_BUDGET (e.g. "40GiB") when it is set, else the
  // device's free memory at construction (cudaMemGetInfo). Throws InvalidArgument when
  // `device` is not a visible CUDA device.
  explicit CudaCachingAllocator(int device, size_t budget = 0);
  ~CudaCachingAllocator() override;
  CudaCachingAllocator(const CudaCachingAllocator&) = delete;
  CudaCachingAllocator& operator=(const CudaCachingAllocator&) = delete;

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  Device device() const override { return Device::cuda(device_); }
  MemoryStats stats() const override;
  void set_budget(size_t bytes) override;
  void reset_peak() override;
  void release_cached() override { empty_cache(); }

  // Returns every cached free block to CUDA (cudaFree); live blocks are untouched.
  void empty_cache();
  // Bytes in cached free blocks.
  size_t cached_bytes() const;

  // The size a request is served with: 512 B multiples below kLargeThreshold, 2 MiB
  // multiples from it on.
  static size_t round_size(size_t bytes);

  static constexpr size_t kSmallRounding = 512;
  static constexpr size_t kLargeThreshold = size_t{1} << 20;
  static constexpr size_t kLargeRounding = size_t{2} << 20;

 private:
  struct LiveBlock {
    size_t block_bytes;    // size of the cudaMalloc'd block
    size_t rounded_bytes;  // rounded request it serves (counted in in_use)
  };

  // Takes a cached block for `rounded` bytes, or nullptr. Returns its size in *block.
  void* take_cached_locked(size_t rounded, size_t* block);
  // cudaMalloc with the cache released and one retry on failure; nullptr when the
  // device still refuses.
  void* malloc_device_locked(size_t bytes);
  void release_cache_locked();

  int device_;
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_blocks_;  // block size -> block, smallest first
  std::unordered_map<void*, LiveBlock> live_;
  MemoryStats stats_;
  size_t cached_ = 0;  // bytes in free_blocks_
};

}  // namespace etr
