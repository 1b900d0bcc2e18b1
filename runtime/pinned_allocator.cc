#include "runtime/pinned_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "runtime/device_context.h"
#ifdef ETR_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace etr {

PinnedHostAllocator::PinnedHostAllocator(size_t budget) : pinned_(visible_cuda_devices() > 0) {
  stats_.budget = budget > 0 ? budget : std::numeric_limits<size_t>::max();
}

PinnedHostAllocator::~PinnedHostAllocator() {
  for (auto& [p, bytes] : live_) {
#ifdef ETR_HAVE_CUDA
    if (pinned_) {
      (void)cudaFreeHost(p);
      continue;
    }
#endif
    std::free(p);
  }
}

void* PinnedHostAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes > stats_.budget - stats_.in_use) {
    throw_out_of_memory(Device::cpu(), bytes, stats_, "page-locked host memory past its budget");
  }
  void* p = nullptr;
#ifdef ETR_HAVE_CUDA
  if (pinned_ && cudaMallocHost(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    p = nullptr;
  }
#endif
  if (!pinned_) p = std::malloc(bytes);
  if (!p) throw_out_of_memory(Device::cpu(), bytes, stats_, "the system refused page-locked host memory");
  live_[p] = bytes;
  stats_.in_use += bytes;
  stats_.reserved += bytes;
  stats_.peak = std::max(stats_.peak, stats_.in_use);
  ++stats_.allocations;
  return p;
}

void PinnedHostAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;
  stats_.in_use -= it->second;
  stats_.reserved -= it->second;
  --stats_.allocations;
  live_.erase(it);
#ifdef ETR_HAVE_CUDA
  if (pinned_) {
    (void)cudaFreeHost(ptr);
    return;
  }
#endif
  std::free(ptr);
}

MemoryStats PinnedHostAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void PinnedHostAllocator::set_budget(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.budget = bytes > 0 ? bytes : std::numeric_limits<size_t>::max();
}

void PinnedHostAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak = stats_.in_use;
}

}  // namespace etr
