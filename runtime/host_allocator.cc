#include "runtime/host_allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>

#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/env.h"

namespace etr {

size_t host_available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return size_t{1} << 40;  // no /proc: do not invent a limit
}

HostAllocator::HostAllocator(size_t budget) {
  if (budget == 0) {
    const char* env = env_value("ETR_HOST_MEMORY_BUDGET");
    budget = (env && *env) ? parse_bytes(env) : host_available_memory();
  }
  stats_.budget = budget;
}

HostAllocator::~HostAllocator() {
  for (auto& [ptr, bytes] : sizes_) release_block(ptr, bytes);
  for (auto& [bytes, ptr] : cache_) release_block(ptr, bytes);
}

// Blocks of 2 MiB and more are mapped from the system directly, 2 MiB aligned and advised
// for huge pages, and unmapped when returned: their pages leave the process at once
// (malloc would keep them in its heap once its dynamic mmap threshold had grown), so the
// resident memory outside this allocator, which a cgroup's budget subtracts
// (runtime/memory_budget.h), does not grow when the batch policy gives memory back.
void* HostAllocator::map_block(size_t bytes) {
  const size_t rounded = (bytes + kHugeAlignment - 1) / kHugeAlignment * kHugeAlignment;
  const size_t span = rounded + kHugeAlignment;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugeAlignment - 1) / kHugeAlignment * kHugeAlignment;
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = aligned + rounded;
  if (start + span > end) munmap(reinterpret_cast<void*>(end), start + span - end);
  void* ptr = reinterpret_cast<void*>(aligned);
  madvise(ptr, rounded, MADV_HUGEPAGE);
  return ptr;
}

void HostAllocator::release_block(void* ptr, size_t bytes) {
  if (bytes >= kHugeAlignment) {
    munmap(ptr, (bytes + kHugeAlignment - 1) / kHugeAlignment * kHugeAlignment);
  } else {
    std::free(ptr);
  }
}

void HostAllocator::count_event_locked(size_t bytes) {
  ++events_;
  if (fail_at_ == 0 || events_ != fail_at_) return;
  fail_at_ = 0;
  throw_out_of_memory(Device::cpu(), bytes, stats_,
                      "an injected allocation failure (ETR_TEST_FAIL_ALLOCATION), as if the budget refused it");
}

uint64_t HostAllocator::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

void HostAllocator::fail_event(uint64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  fail_at_ = n == 0 ? 0 : events_ + n;
}

void* HostAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  count_event_locked(bytes);
  if (bytes > stats_.budget - std::min(stats_.budget, stats_.in_use)) {
    throw_out_of_memory(Device::cpu(), bytes, stats_,
                        "free buffers, lower the batch, or raise ETR_HOST_MEMORY_BUDGET");
  }
  if (bytes > std::numeric_limits<size_t>::max() - 2 * kHugeAlignment) {
    // Rounding up to the alignment would wrap around to a small size.
    throw_out_of_memory(Device::cpu(), bytes, stats_, "no address space holds that many bytes");
  }
  if (auto hit = cache_.find(bytes); hit != cache_.end()) {
    void* ptr = hit->second;
    cache_.erase(hit);
    sizes_.emplace(ptr, bytes);
    stats_.in_use += bytes;
    stats_.allocations += 1;
    stats_.peak = std::max(stats_.peak, stats_.in_use);
    return ptr;
  }
  // A new block: the cache makes room first when it would take reserved past the budget.
  if (stats_.reserved + bytes > stats_.budget) trim_to(stats_.budget - bytes);
  void* ptr = bytes >= kHugeAlignment ? map_block(bytes) : std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (!ptr) {
    throw_out_of_memory(Device::cpu(), bytes, stats_,
                        "the operating system refused the allocation");
  }
  sizes_.emplace(ptr, bytes);
  stats_.in_use += bytes;
  stats_.reserved += bytes;
  stats_.allocations += 1;
  stats_.peak = std::max(stats_.peak, stats_.in_use);
  return ptr;
}

void HostAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sizes_.find(ptr);
  if (it == sizes_.end()) {
    throw InvalidArgument("HostAllocator::deallocate got a pointer it did not allocate");
  }
  const size_t bytes = it->second;
  stats_.in_use -= bytes;
  stats_.allocations -= 1;
  sizes_.erase(it);
  if (bytes >= kHugeAlignment && stats_.reserved <= stats_.budget) {
    cache_.emplace(bytes, ptr);  // kept for the next request of this size
    return;
  }
  stats_.reserved -= bytes;
  release_block(ptr, bytes);
}

void HostAllocator::trim_to(size_t reserved) {
  for (auto it = cache_.begin(); it != cache_.end() && stats_.reserved > reserved;) {
    stats_.reserved -= it->first;
    release_block(it->second, it->first);
    it = cache_.erase(it);
  }
}

void HostAllocator::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  trim_to(0);
}

MemoryStats HostAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void HostAllocator::set_budget(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.budget = bytes;
  if (stats_.reserved > bytes) trim_to(bytes);
}

void HostAllocator::charge(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  count_event_locked(bytes);
  if (bytes > stats_.budget - std::min(stats_.budget, stats_.in_use)) {
    throw_out_of_memory(Device::cpu(), bytes, stats_,
                        "free buffers, lower the batch, or raise ETR_HOST_MEMORY_BUDGET");
  }
  stats_.in_use += bytes;
  stats_.reserved += bytes;
  stats_.peak = std::max(stats_.peak, stats_.in_use);
}

void HostAllocator::discharge(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  bytes = std::min(bytes, stats_.in_use);
  stats_.in_use -= bytes;
  stats_.reserved -= std::min(bytes, stats_.reserved);
}

void HostAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak = stats_.in_use;
}

}  // namespace etr
