// HostWindow (runtime/host_window.h): pages are charged to the allocator's budget while a
// range holds them (a page shared by two ranges once), returned when the last hold ends
// (reading as zeros again; the RSS drops), an acquire past the budget throws OutOfMemory
// and changes nothing, and ranges outside the window are refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "runtime/error.h"
#include "runtime/host_window.h"

namespace etr {
namespace {

size_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

TEST(HostWindow, ChargesHeldPagesOnceAndReturnsThem) {
  HostAllocator alloc(size_t{64} << 20);
  const int64_t page = sysconf(_SC_PAGESIZE) / static_cast<int64_t>(sizeof(float));
  HostWindow w(64 * page, alloc, "test", sysconf(_SC_PAGESIZE));
  EXPECT_EQ(alloc.stats().in_use, 0u);
  w.acquire(0, 3 * page / 2);          // pages 0-1
  w.acquire(page, 3 * page);           // pages 1-2: page 1 is shared
  EXPECT_EQ(w.resident_bytes(), 3 * static_cast<size_t>(page) * sizeof(float));
  EXPECT_EQ(alloc.stats().in_use, w.resident_bytes());
  for (int64_t i = 0; i < 3 * page; ++i) w.data()[i] = 1.0f;
  w.release(0, 3 * page / 2);          // page 0 returned, page 1 still held
  EXPECT_EQ(w.data()[0], 0.0f) << "a returned page reads as zeros";
  EXPECT_EQ(w.data()[page], 1.0f) << "a page still held keeps its contents";
  EXPECT_EQ(w.resident_bytes(), 2 * static_cast<size_t>(page) * sizeof(float));
  w.release(page, 3 * page);
  EXPECT_EQ(w.resident_bytes(), 0u);
  EXPECT_EQ(alloc.stats().in_use, 0u);
  EXPECT_EQ(w.peak_bytes(), 3 * static_cast<size_t>(page) * sizeof(float));
  EXPECT_EQ(w.data()[2 * page], 0.0f);
}

TEST(HostWindow, ReturnedPagesLeaveTheProcess) {
  HostAllocator alloc(size_t{1} << 30);
  const int64_t n = int64_t{64} << 20 >> 2;  // 64 MiB of floats
  HostWindow w(n, alloc, "test");  // huge pages where the kernel has them
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data()) % w.page_bytes(), 0u);
  const size_t before = rss_bytes();
  w.acquire(0, n);
  for (int64_t i = 0; i < n; i += 1024) w.data()[i] = 1.0f;
  EXPECT_GT(rss_bytes(), before + (size_t{48} << 20));
  w.drop_all();
  EXPECT_LT(rss_bytes(), before + (size_t{16} << 20));
  EXPECT_EQ(alloc.stats().in_use, 0u);
}

TEST(HostWindow, RefusesPastTheBudgetAndOutsideTheWindow) {
  const int64_t page = sysconf(_SC_PAGESIZE) / static_cast<int64_t>(sizeof(float));
  HostAllocator alloc(2 * static_cast<size_t>(page) * sizeof(float));
  HostWindow w(8 * page, alloc, "test", sysconf(_SC_PAGESIZE));
  w.acquire(0, page);
  EXPECT_THROW(w.acquire(page, 4 * page), OutOfMemory);
  EXPECT_EQ(w.resident_bytes(), static_cast<size_t>(page) * sizeof(float)) << "nothing changed";
  EXPECT_THROW(w.acquire(0, 9 * page), InvalidArgument);
  EXPECT_THROW(w.release(4 * page, 5 * page), InvalidArgument);
}

// set_page_bytes (ZeRO's blocked gradients): a window of 2 MiB pages counted in system
// pages from then on, at the same address, everything returned first; and back. A page
// size that does not divide the window is refused.
TEST(HostWindow, CountsItsPagesInAnotherSizeAtTheSameAddress) {
  HostAllocator alloc(size_t{64} << 20);
  const size_t small = static_cast<size_t>(sysconf(_SC_PAGESIZE)), huge = size_t{2} << 20;
  HostWindow w(static_cast<int64_t>(2 * huge / sizeof(float)), alloc, "test", huge);
  float* at = w.data();
  w.acquire(0, 10);
  EXPECT_EQ(w.resident_bytes(), huge);
  w.set_page_bytes(small);
  EXPECT_EQ(w.data(), at);
  EXPECT_EQ(w.page_bytes(), small);
  EXPECT_EQ(alloc.stats().in_use, 0u) << "every page returned first";
  w.acquire(0, 10);
  EXPECT_EQ(w.resident_bytes(), small);
  EXPECT_EQ(alloc.stats().in_use, small);
  w.set_page_bytes(huge);
  w.acquire(0, 10);
  EXPECT_EQ(w.resident_bytes(), huge);
  EXPECT_THROW(w.set_page_bytes(small + small / 2), InvalidArgument);
}

}  // namespace
}  // namespace etr
