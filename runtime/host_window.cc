#include "runtime/host_window.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

#include "runtime/bytes.h"
#include "runtime/error.h"

namespace etr {

namespace {

// 2 MiB when transparent huge pages may be asked for and the window spans at least 4 of
// them, else the system page. (4 KiB pages made ZeRO-2 10 % slower than ZeRO-1 on the
// benchmark model, 12 MiB of gradients: etr-bench zero; huge pages hold up to 2 MiB more
// per range boundary, which matters only for small models.)
size_t default_page(int64_t numel) {
  const size_t small = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (static_cast<size_t>(numel) * sizeof(float) < 4 * HostAllocator::kHugeAlignment) return small;
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const bool thp = modes.find("[always]") != std::string::npos ||
                   modes.find("[madvise]") != std::string::npos;
  return thp ? HostAllocator::kHugeAlignment : small;
}

}  // namespace

HostWindow::HostWindow(int64_t numel, HostAllocator& account, std::string name, size_t page_bytes)
    : account_(account), name_(std::move(name)), page_(page_bytes ? page_bytes : default_page(numel)) {
  const size_t small = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (numel < 0 || page_ % small != 0) {
    throw InvalidArgument("a window of " + std::to_string(numel) + " elements in pages of " +
                          std::to_string(page_) + " bytes");
  }
  numel_ = numel;
  bytes_ = (static_cast<size_t>(numel) * sizeof(float) + page_ - 1) / page_ * page_;
  if (bytes_ == 0) return;
  map_bytes_ = bytes_ + (page_ > small ? page_ : 0);  // room to align the start to page_
  void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    const MemoryStats st = account_.stats();
    throw OutOfMemory("cannot reserve " + format_bytes(static_cast<double>(bytes_)) +
                          " of address space for the " + name_ + " window",
                      bytes_, st.in_use, st.peak, st.budget);
  }
  map_ = p;
  const uintptr_t at = (reinterpret_cast<uintptr_t>(p) + page_ - 1) / page_ * page_;
  data_ = reinterpret_cast<float*>(at);
  if (page_ > small) madvise(data_, bytes_, MADV_HUGEPAGE);
  holds_.assign(bytes_ / page_, 0);
}

HostWindow::~HostWindow() {
  if (map_) munmap(map_, map_bytes_);
  account_.discharge(resident_pages_ * page_);
}

std::pair<size_t, size_t> HostWindow::pages(int64_t begin, int64_t end) const {
  if (begin < 0 || end > numel_ || begin > end) {
    throw InvalidArgument("range [" + std::to_string(begin) + ", " + std::to_string(end) +
                          ") is outside the " + name_ + " window of " + std::to_string(numel_) +
                          " elements");
  }
  if (begin == end) return {0, 0};
  const size_t first = static_cast<size_t>(begin) * sizeof(float) / page_;
  const size_t last = (static_cast<size_t>(end) * sizeof(float) - 1) / page_ + 1;
  return {first, last};
}

void HostWindow::acquire(int64_t begin, int64_t end) {
  const auto [first, last] = pages(begin, end);
  size_t fresh = 0;
  for (size_t p = first; p < last; ++p) fresh += holds_[p] == 0;
  if (fresh > 0) account_.charge(fresh * page_);  // may throw: nothing changed yet
  for (size_t p = first; p < last; ++p) ++holds_[p];
  resident_pages_ += fresh;
  peak_pages_ = std::max(peak_pages_, resident_pages_);
}

void HostWindow::release(int64_t begin, int64_t end) {
  const auto [first, last] = pages(begin, end);
  size_t run = last;  // start of the current run of pages to return
  for (size_t p = first; p < last; ++p) {
    if (holds_[p] == 0) {
      throw InvalidArgument("the " + name_ + " window released a page it does not hold");
    }
    if (--holds_[p] == 0) {
      if (run == last) run = p;
    } else if (run != last) {
      return_pages(run, p);
      run = last;
    }
  }
  if (run != last) return_pages(run, last);
}

void HostWindow::return_pages(size_t first, size_t last) {
  madvise(reinterpret_cast<char*>(data_) + first * page_, (last - first) * page_, MADV_DONTNEED);
  resident_pages_ -= last - first;
  account_.discharge((last - first) * page_);
}

void HostWindow::set_page_bytes(size_t page_bytes) {
  const size_t small = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (page_bytes == 0 || page_bytes % small != 0 || (map_ && bytes_ % page_bytes != 0) ||
      reinterpret_cast<uintptr_t>(data_) % page_bytes != 0) {
    throw InvalidArgument("the " + name_ + " window of " + std::to_string(page_) +
                          "-byte pages cannot be counted in pages of " + std::to_string(page_bytes) + " bytes");
  }
  drop_all();
  if (page_bytes == page_) return;
  if (data_) madvise(data_, bytes_, page_bytes > small ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  page_ = page_bytes;
  holds_.assign(bytes_ / page_, 0);
  peak_pages_ = 0;
}

void HostWindow::drop_all() {
  if (!data_) return;
  madvise(data_, bytes_, MADV_DONTNEED);
  account_.discharge(resident_pages_ * page_);
  resident_pages_ = 0;
  std::fill(holds_.begin(), holds_.end(), 0);
}

}  // namespace etr
