#include "runtime/memory_window.h"

#include <string>

#include "runtime/error.h"

namespace etr {

WholeWindow::WholeWindow(int64_t numel, Allocator& alloc, void* stream)
    : numel_(numel), ops_(device_ops(alloc.device())), stream_(stream), buffer_(alloc, bytes()) {
  drop_all();
}

void WholeWindow::check(int64_t begin, int64_t end) const {
  if (begin < 0 || begin > end || end > numel_) {
    throw InvalidArgument("window range [" + std::to_string(begin) + ", " + std::to_string(end) +
                          ") is outside its " + std::to_string(numel_) + " elements");
  }
}

void WholeWindow::acquire(int64_t begin, int64_t end) { check(begin, end); }
void WholeWindow::release(int64_t begin, int64_t end) { check(begin, end); }
void WholeWindow::drop_all() { ops_.zero(data(), bytes(), stream_); }

}  // namespace etr
