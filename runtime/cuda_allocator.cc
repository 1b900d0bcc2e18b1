// CudaCachingAllocator (see the header for the block, stats and budget rules).
#include "runtime/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "runtime/bytes.h"
#include "runtime/cuda_check.h"
#include "runtime/cuda_device_guard.h"
#include "runtime/error.h"
#include "runtime/memory_budget.h"
#include "runtime/env.h"

namespace etr {

namespace {

constexpr const char* kBudgetHint =
    "free buffers, lower the micro-batch, or raise ETR_CUDA_MEMORY_BUDGET";
constexpr const char* kDeviceFullHint =
    "the device refused it even after the cache was released; other processes or "
    "libraries (NCCL, cuBLAS workspaces) hold device memory, so lower the micro-batch or "
    "ETR_CUDA_MEMORY_BUDGET";

}  // namespace

size_t CudaCachingAllocator::round_size(size_t bytes) {
  size_t unit = bytes >= kLargeThreshold ? kLargeRounding : kSmallRounding;
  return (bytes + unit - 1) / unit * unit;
}

CudaCachingAllocator::CudaCachingAllocator(int device, size_t budget) : device_(device) {
  int count = cuda_device_count();
  if (device < 0 || device >= count) {
    throw InvalidArgument("CUDA device " + std::to_string(device) +
                          " is not visible (this process sees " + std::to_string(count) +
                          " CUDA devices); pick an ordinal below that or check "
                          "CUDA_VISIBLE_DEVICES");
  }
  if (budget == 0) {
    const char* env = env_value("ETR_CUDA_MEMORY_BUDGET");
    if (const auto set = budget_setting(env ? env : "", "ETR_CUDA_MEMORY_BUDGET")) {
      budget = *set;
    } else {
      CudaDeviceGuard guard(device_);
      size_t free_bytes = 0, total_bytes = 0;
      CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
      budget = free_bytes;
    }
  }
  stats_.budget = budget;
}

CudaCachingAllocator::~CudaCachingAllocator() {
  // Destructors never throw: errors here (e.g. the runtime already unloading at process
  // exit) are ignored, and the memory goes back with the context anyway.
  int previous = 0;
  bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_ &&
                  cudaSetDevice(device_) == cudaSuccess;
  for (auto& [bytes, ptr] : free_blocks_) (void)cudaFree(ptr);
  for (auto& [ptr, block] : live_) (void)cudaFree(ptr);
  if (switched) (void)cudaSetDevice(previous);
}

void* CudaCachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes > std::numeric_limits<size_t>::max() - kLargeRounding) {
    throw_out_of_memory(device(), bytes, stats_, kBudgetHint);
  }
  size_t rounded = round_size(bytes);
  if (rounded > stats_.budget - std::min(stats_.budget, stats_.in_use)) {
    throw_out_of_memory(device(), rounded, stats_, kBudgetHint);
  }
  size_t block_bytes = 0;
  void* ptr = take_cached_locked(rounded, &block_bytes);
  if (!ptr) {
    // Keep what this allocator holds from CUDA within the budget where the live blocks
    // allow it: cached blocks go back before a fresh block would pass the budget.
    if (stats_.reserved + rounded > stats_.budget) release_cache_locked();
    ptr = malloc_device_locked(rounded);
    if (!ptr) throw_out_of_memory(device(), rounded, stats_, kDeviceFullHint);
    block_bytes = rounded;
    stats_.reserved += rounded;
  }
  live_.emplace(ptr, LiveBlock{block_bytes, rounded});
  stats_.in_use += rounded;
  stats_.allocations += 1;
  stats_.peak = std::max(stats_.peak, stats_.in_use);
  return ptr;
}

void CudaCachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    throw InvalidArgument(
        "CudaCachingAllocator::deallocate got a pointer it did not allocate or already freed; "
        "return each buffer once to the allocator that made it");
  }
  stats_.in_use -= it->second.rounded_bytes;
  stats_.allocations -= 1;
  free_blocks_.emplace(it->second.block_bytes, ptr);
  cached_ += it->second.block_bytes;
  live_.erase(it);
}

void* CudaCachingAllocator::take_cached_locked(size_t rounded, size_t* block) {
  auto it = free_blocks_.lower_bound(rounded);
  // Best fit, but never a block that would waste more than a quarter of itself.
  if (it == free_blocks_.end() || it->first - rounded > it->first / 4) return nullptr;
  void* ptr = it->second;
  *block = it->first;
  cached_ -= it->first;
  free_blocks_.erase(it);
  return ptr;
}

void* CudaCachingAllocator::malloc_device_locked(size_t bytes) {
  CudaDeviceGuard guard(device_);
  for (int attempt = 0; attempt < 2; ++attempt) {
    void* ptr = nullptr;
    cudaError_t rc = cudaMalloc(&ptr, bytes);
    if (rc == cudaSuccess) return ptr;
    if (rc != cudaErrorMemoryAllocation) CUDA_CHECK(rc);
    (void)cudaGetLastError();  // clear the failure so later calls do not report it
    if (attempt == 0) release_cache_locked();
  }
  return nullptr;
}

void CudaCachingAllocator::release_cache_locked() {
  if (free_blocks_.empty()) return;
  CudaDeviceGuard guard(device_);
  while (!free_blocks_.empty()) {
    auto it = free_blocks_.begin();
    size_t bytes = it->first;
    void* ptr = it->second;
    free_blocks_.erase(it);
    cached_ -= bytes;
    stats_.reserved -= bytes;
    CUDA_CHECK(cudaFree(ptr));
  }
}

void CudaCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cache_locked();
}

size_t CudaCachingAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

MemoryStats CudaCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CudaCachingAllocator::set_budget(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.budget = bytes;
}

void CudaCachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak = stats_.in_use;
}

}  // namespace etr
