// HostWindow: a flat float buffer of a whole layout whose memory exists only where a
// range is held: ZeRO-2/3 keep the full gradient or parameter buffer as a window, so the
// layers stay bound to fixed addresses while only the buckets in use take memory
// (parallel/zero_engine.h).
//
//   HostWindow w(layout.numel(), alloc, "parameters");   // address space only
//   w.acquire(b, e);         // pages of [b, e) charged to alloc's budget (OutOfMemory)
//   ... write w.data()[b .. e) ...
//   w.release(b, e);         // pages no held range touches go back to the OS
//   w.drop_all();            // every page back; the buffer reads as zeros again
//
// The address space is reserved with mmap (MAP_NORESERVE); a page is counted while any
// held range touches it (a count per page), and returned with madvise(MADV_DONTNEED)
// when the last one is released, after which it reads as zeros. A page touched without
// acquire() is not counted; drop_all() returns it too.
//
// Pages are 2 MiB transparent huge pages when the kernel offers them (madvise) and the
// window spans at least 4 of them: first touch of 4 KiB pages runs at about 2.4 GB/s on
// these VMs against 14 GB/s with huge pages (docs/machine_notes.md), and a window is touched
// afresh every step; a smaller window keeps 4 KiB pages, so that the memory held follows
// the ranges held closely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/host_allocator.h"
#include "runtime/memory_window.h"

namespace etr {

class HostWindow final : public MemoryWindow {
 public:
  // `numel` floats of address space (OutOfMemory when the system refuses it), counted in
  // pages of `page_bytes` (a multiple of the system page; 0: huge pages when available).
  HostWindow(int64_t numel, HostAllocator& account, std::string name, size_t page_bytes = 0);
  ~HostWindow();
  HostWindow(const HostWindow&) = delete;
  HostWindow& operator=(const HostWindow&) = delete;

  float* data() const override { return data_; }
  size_t page_bytes() const override { return page_; }
  int64_t numel() const override { return numel_; }
  // Holds the pages of [begin, end) (0 <= begin <= end <= numel); InvalidArgument outside.
  void acquire(int64_t begin, int64_t end) override;
  // Ends one hold of [begin, end) (acquired before).
  void release(int64_t begin, int64_t end) override;
  void drop_all() override;
  // Counts the window in pages of `page_bytes` from now on (a multiple of the system page
  // that divides the first one: the address stays): every page returned first. ZeRO's
  // blocked gradients hold a bucket and a block, which 2 MiB pages would round up.
  void set_page_bytes(size_t page_bytes);

  size_t resident_bytes() const override { return resident_pages_ * page_; }
  size_t peak_bytes() const override { return peak_pages_ * page_; }
  void reset_peak() override { peak_pages_ = resident_pages_; }

 private:
  std::pair<size_t, size_t> pages(int64_t begin, int64_t end) const;
  void return_pages(size_t first, size_t last);  // [first, last)

  HostAllocator& account_;
  std::string name_;
  size_t page_;
  float* data_ = nullptr;
  int64_t numel_ = 0;
  size_t bytes_ = 0;  // the window, a multiple of page_
  void* map_ = nullptr;  // the mapping (aligned to page_ inside it)
  size_t map_bytes_ = 0;
  std::vector<uint32_t> holds_;  // per page
  size_t resident_pages_ = 0;
  size_t peak_pages_ = 0;
};

}  // namespace etr
