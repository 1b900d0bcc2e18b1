// Tests of runtime/host_allocator.h and Buffer (runtime/allocator.h): alignment, the
// byte budget and its OutOfMemory error (fields and message), in-use/peak accounting
// (kept here by the test independently and compared), foreign pointers, the
// ETR_HOST_MEMORY_BUDGET variable, and Buffer's ownership rules.
#include "runtime/host_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/error.h"
#include "unit/scoped_env.h"

namespace etr {
namespace {

using testing::ScopedEnv;

constexpr size_t kKi = 1024;
constexpr size_t kMi = kKi * 1024;

uintptr_t addr(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

TEST(HostAllocator, AlignsTo64AndLargeAllocationsTo2MiB) {
  HostAllocator a(64 * kMi);
  for (size_t bytes : {size_t{1}, size_t{63}, size_t{64}, size_t{100}, 4 * kKi + 1, 2 * kMi - 1}) {
    void* p = a.allocate(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(addr(p) % 64, 0u) << bytes;
    std::memset(p, 0xab, bytes);  // the whole request is usable
    a.deallocate(p);
  }
  for (size_t bytes : {2 * kMi, 2 * kMi + 1, 5 * kMi + 3}) {
    void* p = a.allocate(bytes);
    EXPECT_EQ(addr(p) % (2 * kMi), 0u) << bytes;
    std::memset(p, 0xcd, bytes);
    a.deallocate(p);
  }
  EXPECT_EQ(HostAllocator::kAlignment, 64u);
  EXPECT_EQ(HostAllocator::kHugeAlignment, 2 * kMi);
}

TEST(HostAllocator, ZeroBytesIsNullAndCountsNothing) {
  HostAllocator a(kMi);
  EXPECT_EQ(a.allocate(0), nullptr);
  EXPECT_EQ(a.stats().in_use, 0u);
  EXPECT_EQ(a.stats().allocations, 0u);
  a.deallocate(nullptr);  // a no-op
}

TEST(HostAllocator, BudgetIsEnforcedWithAnOutOfMemoryThatSaysWhy) {
  HostAllocator a(kMi);
  void* p = a.allocate(600 * kKi);
  try {
    a.allocate(600 * kKi);
    ADD_FAILURE() << "no exception past the budget";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.requested(), 600 * kKi);
    EXPECT_EQ(e.in_use(), 600 * kKi);
    EXPECT_EQ(e.peak(), 600 * kKi);
    EXPECT_EQ(e.budget(), kMi);
    std::string what = e.what();
    EXPECT_NE(what.find("out of memory on cpu: requested 600 KiB with 600 KiB in use (peak "
                        "600 KiB) under a budget of 1 MiB"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("ETR_HOST_MEMORY_BUDGET"), std::string::npos) << what;
  }
  // The failed request changed nothing; exactly the rest of the budget still fits.
  EXPECT_EQ(a.stats().in_use, 600 * kKi);
  EXPECT_EQ(a.stats().allocations, 1u);
  void* q = a.allocate(kMi - 600 * kKi);
  EXPECT_THROW(a.allocate(1), OutOfMemory);
  a.deallocate(p);
  a.deallocate(q);
  EXPECT_EQ(a.stats().in_use, 0u);
}

TEST(HostAllocator, OutOfMemoryIsAnEtrError) {
  HostAllocator a(100);
  EXPECT_THROW(a.allocate(101), Error);
}

// Requests near SIZE_MAX must fail cleanly even under an unlimited budget: rounding
// them up to the alignment must not wrap around to a small allocation.
TEST(HostAllocator, HugeRequestUnderUnlimitedBudgetThrows) {
  HostAllocator a(std::numeric_limits<size_t>::max());
  EXPECT_THROW(a.allocate(std::numeric_limits<size_t>::max() - 10), OutOfMemory);
  EXPECT_THROW(a.allocate(std::numeric_limits<size_t>::max() / 2), OutOfMemory);
  EXPECT_EQ(a.stats().in_use, 0u);
}

TEST(HostAllocator, LoweringTheBudgetBelowUseRefusesNewAllocations) {
  HostAllocator a(kMi);
  void* p = a.allocate(512 * kKi);
  a.set_budget(256 * kKi);
  EXPECT_EQ(a.stats().budget, 256 * kKi);
  EXPECT_THROW(a.allocate(1), OutOfMemory);
  a.deallocate(p);
  a.deallocate(a.allocate(256 * kKi));
}

// Freed blocks of 2 MiB and more come back for the same size without new pages; the
// budget limits what is in use, and cutting it returns the cache to the system.
TEST(HostAllocator, LargeFreedBlocksAreCachedAndTrimmedByTheBudget) {
  HostAllocator a(64 * kMi);
  void* p = a.allocate(4 * kMi);
  a.deallocate(p);
  EXPECT_EQ(a.stats().in_use, 0u);
  EXPECT_EQ(a.stats().reserved, 4 * kMi);  // kept
  EXPECT_EQ(a.allocate(4 * kMi), p);        // the same block again
  EXPECT_EQ(a.stats().reserved, 4 * kMi);
  a.deallocate(p);
  void* q = a.allocate(3 * kMi);  // another size: a new block
  EXPECT_EQ(a.stats().reserved, 7 * kMi);
  a.set_budget(5 * kMi);  // below what is reserved: the cache goes back
  EXPECT_EQ(a.stats().reserved, 3 * kMi);
  EXPECT_THROW(a.allocate(4 * kMi), OutOfMemory);  // 3 + 4 MiB in use would pass 5 MiB
  a.deallocate(q);
  EXPECT_EQ(a.stats().reserved, 3 * kMi);
  a.trim();
  EXPECT_EQ(a.stats().reserved, 0u);
  // A small block is never cached.
  a.deallocate(a.allocate(kKi));
  EXPECT_EQ(a.stats().reserved, 0u);
  // The budget counts in-use bytes: a cached block does not stand in the way of another.
  HostAllocator b(6 * kMi);
  b.deallocate(b.allocate(4 * kMi));
  void* r = b.allocate(5 * kMi);  // the cached 4 MiB block is returned to make room
  EXPECT_EQ(b.stats().reserved, 5 * kMi);
  b.deallocate(r);
}

// A random sequence of allocations and frees, with in-use and peak tracked by the test.
TEST(HostAllocator, InUseAndPeakFollowARandomSequence) {
  HostAllocator a(64 * kMi);
  std::mt19937 rng(7);
  std::vector<std::pair<void*, size_t>> live;
  size_t in_use = 0, peak = 0;
  for (int i = 0; i < 2000; ++i) {
    if (live.empty() || rng() % 3 != 0) {
      size_t bytes = 1 + rng() % (64 * kKi);
      live.emplace_back(a.allocate(bytes), bytes);
      in_use += bytes;
      peak = std::max(peak, in_use);
    } else {
      size_t k = rng() % live.size();
      a.deallocate(live[k].first);
      in_use -= live[k].second;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    MemoryStats s = a.stats();
    ASSERT_EQ(s.in_use, in_use);
    ASSERT_EQ(s.peak, peak);
    ASSERT_EQ(s.allocations, live.size());
    ASSERT_GE(s.reserved, s.in_use);
  }
  for (auto& [p, bytes] : live) a.deallocate(p);
  EXPECT_EQ(a.stats().in_use, 0u);
  EXPECT_EQ(a.stats().peak, peak);
}

TEST(HostAllocator, ResetPeakRestartsFromCurrentUse) {
  HostAllocator a(kMi);
  void* p = a.allocate(100);
  void* q = a.allocate(200);
  a.deallocate(q);
  EXPECT_EQ(a.stats().peak, 300u);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak, 100u);
  void* r = a.allocate(50);
  EXPECT_EQ(a.stats().peak, 150u);
  a.deallocate(r);
  a.deallocate(p);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak, 0u);
}

TEST(HostAllocator, ForeignOrFreedPointerIsInvalidArgument) {
  HostAllocator a(kMi), b(kMi);
  int on_stack = 0;
  EXPECT_THROW(a.deallocate(&on_stack), InvalidArgument);
  void* p = b.allocate(64);
  EXPECT_THROW(a.deallocate(p), InvalidArgument);  // another allocator's memory
  EXPECT_EQ(b.stats().in_use, 64u);
  b.deallocate(p);
  try {
    b.deallocate(p);  // twice
    ADD_FAILURE() << "no exception for a double free";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("did not allocate"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b.stats().in_use, 0u);
}

// MemAvailable and MemTotal, read here from /proc/meminfo.
size_t meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string k, unit;
  size_t kib;
  while (in >> k >> kib >> unit)
    if (k == key + ":") return kib * 1024;
  return 0;
}

TEST(HostAllocator, BudgetFromEnvironment) {
  {
    ScopedEnv env("ETR_HOST_MEMORY_BUDGET", "3MiB");
    HostAllocator a;
    EXPECT_EQ(a.stats().budget, 3 * kMi);
    void* p = a.allocate(3 * kMi);
    EXPECT_THROW(a.allocate(1), OutOfMemory);
    a.deallocate(p);
    HostAllocator explicit_budget(kMi);  // an explicit budget wins over the variable
    EXPECT_EQ(explicit_budget.stats().budget, kMi);
  }
  {
    ScopedEnv env("ETR_HOST_MEMORY_BUDGET", "plenty");
    try {
      HostAllocator a;
      ADD_FAILURE() << "no exception";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("'plenty'"), std::string::npos) << e.what();
    }
  }
  {
    ScopedEnv env("ETR_HOST_MEMORY_BUDGET", std::nullopt);
    HostAllocator a;
    size_t total = meminfo_bytes("MemTotal");
    ASSERT_GT(total, 0u);
    EXPECT_GT(a.stats().budget, 0u);
    EXPECT_LE(a.stats().budget, total);  // MemAvailable never exceeds MemTotal
  }
}

TEST(Buffer, OwnsOneAllocation) {
  HostAllocator a(kMi);
  {
    Buffer b(a, 1000);
    EXPECT_NE(b.data(), nullptr);
    EXPECT_EQ(b.size(), 1000u);
    EXPECT_TRUE(b.device().is_cpu());
    EXPECT_EQ(a.stats().in_use, 1000u);
    TensorView v = b.view(DType::kF32);
    EXPECT_EQ(v.numel(), 250);
    EXPECT_EQ(v.data(), b.data());
    EXPECT_EQ(b.view(DType::kF64).numel(), 125);
  }
  EXPECT_EQ(a.stats().in_use, 0u);
  EXPECT_EQ(a.stats().allocations, 0u);
}

TEST(Buffer, MoveTransfersOwnership) {
  HostAllocator a(kMi);
  Buffer b(a, 100);
  void* p = b.data();
  Buffer c(std::move(b));
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.size(), 100u);
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(b.size(), 0u);
  Buffer d(a, 200);
  EXPECT_EQ(a.stats().in_use, 300u);
  d = std::move(c);  // d's own 200 bytes are returned
  EXPECT_EQ(d.data(), p);
  EXPECT_EQ(a.stats().in_use, 100u);
  EXPECT_EQ(a.stats().allocations, 1u);
  d.reset();
  EXPECT_EQ(d.data(), nullptr);
  EXPECT_EQ(a.stats().in_use, 0u);
  d.reset();  // twice is harmless
}

TEST(Buffer, FailedAllocationLeavesNothingBehind) {
  HostAllocator a(kKi);
  Buffer keep(a, 512);
  EXPECT_THROW(Buffer(a, 1024), OutOfMemory);
  EXPECT_EQ(a.stats().in_use, 512u);
  Buffer empty;
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_TRUE(empty.device().is_cpu());
}

}  // namespace
}  // namespace etr
