// CudaCachingAllocator: budget and OutOfMemory, block rounding and reuse, the stats
// (in_use counts rounded sizes; fragmentation = reserved - in_use), empty_cache, and
// concurrent use. Every test is skipped when no CUDA device is visible.
#include "runtime/cuda_allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "runtime/bytes.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"

namespace etr {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Sets an environment variable for one scope.
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~EnvGuard() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

TEST(CudaAllocator, RoundsSmallTo512BytesAndLargeTo2MiB) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  EXPECT_EQ(CudaCachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CudaCachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CudaCachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CudaCachingAllocator::round_size(kMiB - 1), kMiB);
  EXPECT_EQ(CudaCachingAllocator::round_size(kMiB), 2 * kMiB);
  EXPECT_EQ(CudaCachingAllocator::round_size(2 * kMiB + 1), 4 * kMiB);
}

TEST(CudaAllocator, BudgetThrowsOutOfMemoryWithTheNumbers) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  CudaCachingAllocator alloc(0, 4 * kMiB);
  void* p = alloc.allocate(3 * kMiB);  // rounded to 4 MiB: the whole budget
  ASSERT_NE(p, nullptr);
  try {
    alloc.allocate(1000);
    FAIL() << "an allocation past the budget must throw OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.requested(), 1024u);  // rounded size, as in_use counts it
    EXPECT_EQ(e.in_use(), 4 * kMiB);
    EXPECT_EQ(e.peak(), 4 * kMiB);
    EXPECT_EQ(e.budget(), 4 * kMiB);
    std::string msg = e.what();
    EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("requested " + format_bytes(1024)), std::string::npos) << msg;
    EXPECT_NE(msg.find(format_bytes(4.0 * kMiB) + " in use"), std::string::npos) << msg;
    EXPECT_NE(msg.find("budget of " + format_bytes(4.0 * kMiB)), std::string::npos) << msg;
    EXPECT_NE(msg.find("ETR_CUDA_MEMORY_BUDGET"), std::string::npos) << msg;
  }
  alloc.deallocate(p);
  EXPECT_NO_THROW(alloc.deallocate(alloc.allocate(4 * kMiB)));
}

TEST(CudaAllocator, BudgetComesFromTheEnvironmentOrFreeMemory) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  {
    EnvGuard env("ETR_CUDA_MEMORY_BUDGET", "3MiB");
    EXPECT_EQ(CudaCachingAllocator(0).stats().budget, 3 * kMiB);
    EXPECT_EQ(CudaCachingAllocator(0, 5 * kMiB).stats().budget, 5 * kMiB);  // explicit wins
  }
  {
    EnvGuard env("ETR_CUDA_MEMORY_BUDGET", "");
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    size_t budget = CudaCachingAllocator(0).stats().budget;
    EXPECT_GT(budget, 0u);
    EXPECT_LE(budget, total_bytes);
  }
  {
    EnvGuard env("ETR_CUDA_MEMORY_BUDGET", "lots");
    EXPECT_THROW(CudaCachingAllocator{0}, ConfigError);
  }
}

TEST(CudaAllocator, ReusesTheCachedBlockForTheSameSize) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  CudaCachingAllocator alloc(0, 256 * kMiB);
  void* small = alloc.allocate(1000);
  alloc.deallocate(small);
  EXPECT_EQ(alloc.allocate(1000), small);
  alloc.deallocate(small);
  EXPECT_EQ(alloc.allocate(1024), small);  // same rounded size
  alloc.deallocate(small);

  void* large = alloc.allocate(3 * kMiB);
  alloc.deallocate(large);
  EXPECT_EQ(alloc.allocate(4 * kMiB), large);
  alloc.deallocate(large);

  // Best fit within a quarter of the block: a 10 MiB block serves 8 MiB, not 6 MiB.
  void* ten = alloc.allocate(10 * kMiB);
  alloc.deallocate(ten);
  void* six = alloc.allocate(6 * kMiB);
  EXPECT_NE(six, ten);
  void* eight = alloc.allocate(8 * kMiB);
  EXPECT_EQ(eight, ten);
  alloc.deallocate(six);
  alloc.deallocate(eight);
}

TEST(CudaAllocator, StatsCountRoundedSizesAndFragmentation) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  CudaCachingAllocator alloc(0, 256 * kMiB);
  EXPECT_EQ(alloc.allocate(0), nullptr);
  alloc.deallocate(nullptr);
  void* a = alloc.allocate(1000);
  void* b = alloc.allocate(3 * kMiB);
  MemoryStats s = alloc.stats();
  EXPECT_EQ(s.in_use, 1024 + 4 * kMiB);
  EXPECT_EQ(s.reserved, 1024 + 4 * kMiB);
  EXPECT_EQ(s.peak, 1024 + 4 * kMiB);
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.fragmentation(), 0u);

  alloc.deallocate(b);
  s = alloc.stats();
  EXPECT_EQ(s.in_use, 1024u);
  EXPECT_EQ(s.reserved, 1024 + 4 * kMiB);
  EXPECT_EQ(s.fragmentation(), 4 * kMiB);
  EXPECT_EQ(s.peak, 1024 + 4 * kMiB);
  EXPECT_EQ(s.allocations, 1u);
  EXPECT_EQ(alloc.cached_bytes(), 4 * kMiB);
  alloc.reset_peak();
  EXPECT_EQ(alloc.stats().peak, 1024u);

  // A 10 MiB block serving an 8 MiB request: its 2 MiB of slack is fragmentation.
  void* ten = alloc.allocate(10 * kMiB);
  alloc.deallocate(ten);
  void* eight = alloc.allocate(8 * kMiB);
  ASSERT_EQ(eight, ten);
  s = alloc.stats();
  EXPECT_EQ(s.in_use, 1024 + 8 * kMiB);
  EXPECT_EQ(s.reserved, 1024 + 4 * kMiB + 10 * kMiB);
  EXPECT_EQ(s.fragmentation(), 4 * kMiB + 2 * kMiB);
  alloc.deallocate(eight);
  alloc.deallocate(a);
  EXPECT_EQ(alloc.stats().in_use, 0u);
  EXPECT_EQ(alloc.stats().allocations, 0u);

  int not_ours = 0;
  EXPECT_THROW(alloc.deallocate(&not_ours), InvalidArgument);
}

TEST(CudaAllocator, EmptyCacheReleasesOnlyFreeBlocks) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  CudaCachingAllocator alloc(0, 256 * kMiB);
  void* kept = alloc.allocate(2 * kMiB);
  alloc.deallocate(alloc.allocate(6 * kMiB));
  alloc.deallocate(alloc.allocate(4096));
  EXPECT_EQ(alloc.cached_bytes(), 6 * kMiB + 4096);
  alloc.empty_cache();
  MemoryStats s = alloc.stats();
  EXPECT_EQ(alloc.cached_bytes(), 0u);
  EXPECT_EQ(s.reserved, 2 * kMiB);
  EXPECT_EQ(s.in_use, 2 * kMiB);
  EXPECT_EQ(s.fragmentation(), 0u);
  CUDA_CHECK(cudaMemset(kept, 0, 2 * kMiB));  // the live block is still usable
  CUDA_CHECK(cudaDeviceSynchronize());
  alloc.deallocate(kept);
}

TEST(CudaAllocator, ReleasesTheCacheBeforeReservingPastTheBudget) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  CudaCachingAllocator alloc(0, 8 * kMiB);
  alloc.deallocate(alloc.allocate(4 * kMiB));  // cached: 4 MiB
  void* p = alloc.allocate(6 * kMiB);          // 4 + 6 > 8: the cached block goes first
  MemoryStats s = alloc.stats();
  EXPECT_EQ(s.reserved, 6 * kMiB);
  EXPECT_EQ(s.in_use, 6 * kMiB);
  EXPECT_EQ(alloc.cached_bytes(), 0u);
  alloc.deallocate(p);
}

TEST(CudaAllocator, BuffersAndConcurrentUse) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  CudaCachingAllocator alloc(0, 1024 * kMiB);
  {
    Buffer buf(alloc, 100);
    EXPECT_EQ(buf.device(), Device::cuda(0));
    EXPECT_EQ(buf.view(DType::kF32).device(), Device::cuda(0));
    EXPECT_EQ(alloc.stats().in_use, 512u);
  }
  EXPECT_EQ(alloc.stats().in_use, 0u);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&alloc, t] {
      for (int i = 0; i < 200; ++i) {
        size_t bytes = static_cast<size_t>((i * 7919 + t * 104729) % (3 * kMiB)) + 1;
        void* p = alloc.allocate(bytes);
        alloc.deallocate(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(alloc.stats().in_use, 0u);
  EXPECT_EQ(alloc.stats().allocations, 0u);
  EXPECT_EQ(alloc.stats().reserved, alloc.cached_bytes());
}

TEST(CudaAllocator, RejectsADeviceThatIsNotVisible) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  EXPECT_THROW(CudaCachingAllocator{cuda_device_count()}, InvalidArgument);
  EXPECT_THROW(CudaCachingAllocator{-1}, InvalidArgument);
}

}  // namespace
}  // namespace etr
