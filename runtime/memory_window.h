// MemoryWindow: a flat array of `numel` floats whose memory exists, and counts against a
// budget, only while ranges of it are held (ZeRO's gradient and parameter windows,
// parallel/zero_engine.h). acquire() holds a range's memory, release() ends a hold; a
// page no range holds any more may lose its contents, and reads as zero when acquired again;
// drop_all() ends every hold and zeroes everything.
//
// Two kinds: HostWindow (runtime/host_window.h: address space reserved once, pages
// committed and returned by the kernel) and WholeWindow (below: one allocation of the
// whole array from any allocator, on any device; holds are only checked, the memory stays).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/allocator.h"
#include "runtime/kernels/device_ops.h"

namespace etr {

class MemoryWindow {
 public:
  virtual ~MemoryWindow() = default;
  virtual float* data() const = 0;
  virtual int64_t numel() const = 0;
  // The unit memory comes and goes in (the whole array for a WholeWindow).
  virtual size_t page_bytes() const = 0;
  // Holds the memory of [begin, end) (0 <= begin <= end <= numel); InvalidArgument outside.
  virtual void acquire(int64_t begin, int64_t end) = 0;
  virtual void release(int64_t begin, int64_t end) = 0;
  virtual void drop_all() = 0;
  virtual size_t resident_bytes() const = 0;
  virtual size_t peak_bytes() const = 0;
  virtual void reset_peak() = 0;
};

// The whole array, allocated at construction from `alloc` (OutOfMemory) and zeroed; its
// memory counts in full from the start. drop_all() zeroes it on `stream` through the
// device's operations. For a device without paged windows (a GPU, until CUDA's virtual
// memory mapping backs one), or host memory in the tests of the device path.
class WholeWindow final : public MemoryWindow {
 public:
  WholeWindow(int64_t numel, Allocator& alloc, void* stream);
  float* data() const override { return static_cast<float*>(buffer_.data()); }
  int64_t numel() const override { return numel_; }
  size_t page_bytes() const override { return bytes(); }
  void acquire(int64_t begin, int64_t end) override;
  void release(int64_t begin, int64_t end) override;
  void drop_all() override;
  size_t resident_bytes() const override { return bytes(); }
  size_t peak_bytes() const override { return bytes(); }
  void reset_peak() override {}

 private:
  size_t bytes() const { return static_cast<size_t>(numel_) * sizeof(float); }
  void check(int64_t begin, int64_t end) const;
  int64_t numel_;
  const DeviceOps& ops_;
  void* stream_;
  Buffer buffer_;
};

}  // namespace etr
