#include "runtime/param_layout.h"

#include <algorithm>
#include <iterator>

#include "runtime/error.h"

namespace etr {

size_t ParamLayout::add(std::string name, Shape shape, int layer, bool weight_decay, DType dtype) {
  if (find(name)) throw InvalidArgument("tensor '" + name + "' is already in the layout");
  if (!entries_.empty() && layer < entries_.back().layer) {
    throw InvalidArgument("tensor '" + name + "' of layer " + std::to_string(layer) +
                          " comes after layer " + std::to_string(entries_.back().layer) +
                          "; add tensors in forward order");
  }
  if (layer < 0) throw InvalidArgument("tensor '" + name + "' has a negative layer index");
  const int64_t offset = (numel_ + kAlignElements - 1) / kAlignElements * kAlignElements;
  entries_.push_back(TensorEntry{std::move(name), offset, shape, dtype, layer, weight_decay});
  try {
    index_.emplace(entries_.back().name, entries_.size() - 1);
  } catch (...) {
    entries_.pop_back();  // the table and its index stay in step
    throw;
  }
  numel_ = offset + shape.numel();
  return entries_.size() - 1;
}

const TensorEntry* ParamLayout::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second];
}

int64_t ParamLayout::param_count() const {
  int64_t n = 0;
  for (const TensorEntry& e : entries_) n += e.numel();
  return n;
}

std::pair<int64_t, int64_t> ParamLayout::layer_range(int layer) const {
  // Entries are in non-decreasing layer order (add() enforces it): a binary search, so
  // asking every layer's range (the bucket reducer does) is not quadratic.
  auto first = std::lower_bound(entries_.begin(), entries_.end(), layer,
                                [](const TensorEntry& e, int l) { return e.layer < l; });
  auto last = std::upper_bound(first, entries_.end(), layer,
                               [](int l, const TensorEntry& e) { return l < e.layer; });
  if (first == last) return {0, 0};
  return {first->offset, std::prev(last)->offset + std::prev(last)->numel()};
}

int64_t ParamLayout::padded_numel(int n) const {
  ETR_CHECK_GT(n, 0);
  return (numel_ + n - 1) / n * n;
}

std::pair<int64_t, int64_t> ParamLayout::shard_range(int r, int n) const {
  ETR_CHECK(r >= 0 && r < n) << "shard " << r << " of " << n;
  const int64_t per = padded_numel(n) / n;
  return {per * r, per * (r + 1)};
}

TensorView ParamLayout::view(void* base, size_t i, Device device) const {
  const TensorEntry& e = at(i);
  return TensorView(static_cast<char*>(base) + e.offset * dtype_size(e.dtype), e.dtype, e.shape,
                    device);
}

}  // namespace etr
