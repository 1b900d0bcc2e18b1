#include "runtime/flat_state.h"

#include "runtime/error.h"
#include "runtime/kernels/device_ops.h"

namespace etr {

FlatState::FlatState(const ParamLayout& layout, Allocator& alloc, std::vector<HeldRange> held,
                     DType dtype)
    : layout_(layout), alloc_(alloc), dtype_(dtype), device_(alloc.device()), held_(std::move(held)) {
  if (held_.empty()) held_.push_back({0, layout_.numel()});
  const int64_t limit = layout_.padded_numel(1);
  int64_t prev_end = 0;
  for (const HeldRange& r : held_) {
    if (r.begin < prev_end || r.end <= r.begin || r.end > limit) {
      throw InvalidArgument("held range [" + std::to_string(r.begin) + ", " +
                            std::to_string(r.end) + ") is empty, overlaps the one before or "
                            "lies outside the layout's " + std::to_string(limit) + " elements");
    }
    offsets_.push_back(held_numel_);
    held_numel_ += r.numel();
    prev_end = r.end;
  }
}

bool FlatState::holds_all() const {
  return held_.size() == 1 && held_[0].begin == 0 && held_[0].end >= layout_.numel();
}

void FlatState::add(std::string_view name) { add(name, dtype_); }

void FlatState::add(std::string_view name, DType dtype) {
  if (has(name)) throw InvalidArgument("the flat state '" + std::string(name) + "' exists already");
  const size_t bytes = static_cast<size_t>(held_numel_) * dtype_size(dtype);
  Named n{std::string(name), dtype, Buffer(alloc_, bytes)};
  states_.push_back(std::move(n));
  zero(name);
}

DType FlatState::dtype(std::string_view name) const {
  return const_cast<FlatState*>(this)->find(name).dtype;
}

bool FlatState::has(std::string_view name) const {
  for (const Named& n : states_) {
    if (n.name == name) return true;
  }
  return false;
}

std::vector<std::string> FlatState::names() const {
  std::vector<std::string> out;
  for (const Named& n : states_) out.push_back(n.name);
  return out;
}

FlatState::Named& FlatState::find(std::string_view name) {
  for (Named& n : states_) {
    if (n.name == name) return n;
  }
  throw InvalidArgument("there is no flat state '" + std::string(name) + "'");
}

void* FlatState::raw(std::string_view name, size_t element_bytes) {
  Named& n = find(name);
  if (element_bytes != dtype_size(n.dtype)) {
    throw InvalidArgument("the flat state '" + std::string(name) + "' holds " +
                          std::string(dtype_name(n.dtype)) + ", not elements of " +
                          std::to_string(element_bytes) + " bytes");
  }
  return n.buffer.data();
}

void FlatState::zero(std::string_view name) {
  const DeviceOps& ops = device_ops(device_);
  // On a GPU: after any work of any stream (the legacy stream does not wait for the
  // non-blocking ones), and done when it returns.
  ops.synchronize_device();
  Named& n = find(name);
  ops.zero(n.buffer.data(), static_cast<size_t>(held_numel_) * dtype_size(n.dtype), nullptr);
  ops.synchronize_device();
}

size_t FlatState::bytes() const {
  size_t total = 0;
  for (const Named& n : states_) total += static_cast<size_t>(held_numel_) * dtype_size(n.dtype);
  return total;
}

}  // namespace etr
