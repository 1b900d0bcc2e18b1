// TensorView: a typed, shaped window onto memory somewhere (host or a CUDA device).
// It owns nothing; the flat buffers of docs/design.md own the bytes, and views are ranges
// of them (`slice` on a flat view is how a bucket or a shard is addressed).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "runtime/check.h"
#include "runtime/device.h"
#include "runtime/dtype.h"

namespace etr {

// Up to kMaxDims extents, stored inline so a view never allocates.
class Shape {
 public:
  static constexpr int kMaxDims = 6;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    ETR_CHECK_LE(dims.size(), kMaxDims) << "a tensor has at most " << kMaxDims << " dims";
    for (int64_t d : dims) {
      ETR_CHECK_GE(d, 0) << "tensor extents are non-negative";
      dims_[ndim_++] = d;
    }
  }
  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim_; ++i) n *= dims_[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (ndim_ != o.ndim_) return false;
    for (int i = 0; i < ndim_; ++i)
      if (dims_[i] != o.dims_[i]) return false;
    return true;
  }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < ndim_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + "]";
  }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

class TensorView {
 public:
  TensorView() = default;
  TensorView(void* data, DType dtype, Shape shape, Device device = Device::cpu())
      : data_(data), dtype_(dtype), shape_(shape), device_(device) {}

  // A 1-D view of `count` elements.
  static TensorView flat(void* data, int64_t count, DType dtype, Device device = Device::cpu()) {
    return TensorView(data, dtype, Shape{count}, device);
  }
  template <typename T>
  static TensorView flat(T* data, int64_t count, DType dtype, Device device = Device::cpu()) {
    return flat(static_cast<void*>(const_cast<std::remove_const_t<T>*>(data)), count, dtype,
                device);
  }

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  Device device() const { return device_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  // Elements [offset, offset + count) of this view read as a flat array.
  TensorView slice(int64_t offset, int64_t count) const {
    // count <= numel() - offset: offset + count could overflow.
    ETR_CHECK(offset >= 0 && count >= 0 && offset <= numel() && count <= numel() - offset)
        << "a slice of " << count << " elements at offset " << offset << " is outside a view of "
        << numel() << " elements";
    return flat(static_cast<char*>(data_) + offset * static_cast<int64_t>(dtype_size(dtype_)),
                count, dtype_, device_);
  }

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
  Device device_ = Device::cpu();
};

}  // namespace etr
