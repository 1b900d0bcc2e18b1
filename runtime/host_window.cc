#include "runtime/host_window.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "runtime/bytes.h"
#include "runtime/error.h"

namespace etr {

HostWindow::HostWindow(int64_t numel, HostAllocator& account, std::string name)
    : account_(account), name_(std::move(name)), page_(static_cast<size_t>(sysconf(_SC_PAGESIZE))) {
  if (numel < 0) throw InvalidArgument("a window of " + std::to_string(numel) + " elements");
  numel_ = numel;
  bytes_ = (static_cast<size_t>(numel) * sizeof(float) + page_ - 1) / page_ * page_;
  if (bytes_ == 0) return;
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    const MemoryStats st = account_.stats();
    throw OutOfMemory("cannot reserve " + format_bytes(static_cast<double>(bytes_)) +
                          " of address space for the " + name_ + " window",
                      bytes_, st.in_use, st.peak, st.budget);
  }
  data_ = static_cast<float*>(p);
  holds_.assign(bytes_ / page_, 0);
}

HostWindow::~HostWindow() {
  if (data_) munmap(data_, bytes_);
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

void HostWindow::drop_all() {
  if (!data_) return;
  madvise(data_, bytes_, MADV_DONTNEED);
  account_.discharge(resident_pages_ * page_);
  resident_pages_ = 0;
  std::fill(holds_.begin(), holds_.end(), 0);
}

}  // namespace etr
