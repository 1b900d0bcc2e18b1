#include "checkpoint/shard_plan.h"

#include <algorithm>
#include <cstdio>

#include "runtime/error.h"

namespace etr {

ShardPlan::ShardPlan(const ParamLayout& layout, int world, std::vector<std::string> states)
    : layout_(layout), world_(world), states_(std::move(states)) {
  if (world < 1) throw InvalidArgument("a checkpoint needs at least one writer");
  for (const TensorEntry& e : layout.entries()) {
    if (e.dtype != DType::kF32) {
      throw InvalidArgument("checkpoints store f32 state; tensor " + e.name + " is not f32");
    }
    tensors_.push_back(Tensor{&e, packed_numel_});
    packed_numel_ += e.numel();
  }
}

std::pair<int64_t, int64_t> ShardPlan::range(int rank) const {
  // P r / N without overflow for any realistic P (< 2^50) and N (< 2^13).
  const auto at = [&](int r) {
    return static_cast<int64_t>((static_cast<__int128>(packed_numel_) * r) / world_);
  };
  return {at(rank), at(rank + 1)};
}

std::pair<int64_t, int64_t> ShardPlan::flat_range(int rank) const {
  const auto [a, b] = range(rank);
  if (a >= b) return {0, 0};
  // The flat offset of packed element p (tensors_ is sorted by packed_begin).
  const auto flat = [&](int64_t p) {
    auto it = std::upper_bound(tensors_.begin(), tensors_.end(), p,
                               [](int64_t x, const Tensor& t) { return x < t.packed_begin; });
    --it;  // the last tensor starting at or before p: it holds p (an empty one never does)
    return it->entry->offset + (p - it->packed_begin);
  };
  return {flat(a), flat(b - 1) + 1};
}

uint64_t ShardPlan::file_bytes(int rank) const {
  const auto [a, b] = range(rank);
  return static_cast<uint64_t>(b - a) * sizeof(float) * states_.size();
}

std::string ShardPlan::file_name(int rank) const {
  char name[64];
  std::snprintf(name, sizeof name, "shard-%05d-of-%05d.bin", rank, world_);
  return name;
}

void ShardPlan::describe(ckpt::Manifest& manifest) const {
  for (const std::string& s : states_) manifest.add_states(s);
  for (size_t si = 0; si < states_.size(); ++si) {
    for (const Tensor& t : tensors_) {
      ckpt::TensorRecord* rec = manifest.add_tensors();
      rec->set_name(t.entry->name);
      rec->set_state(states_[si]);
      rec->set_dtype("f32");
      for (int d = 0; d < t.entry->shape.ndim(); ++d) rec->add_shape(t.entry->shape[d]);
      const int64_t tb = t.packed_begin, te = tb + t.entry->numel();
      for (int r = 0; r < world_; ++r) {
        const auto [a, b] = range(r);
        const int64_t lo = std::max(a, tb), hi = std::min(b, te);
        if (lo >= hi) continue;
        ckpt::Extent* e = rec->add_extents();
        e->set_file(file_name(r));
        e->set_file_offset(static_cast<uint64_t>(static_cast<int64_t>(si) * (b - a) + (lo - a)) *
                           sizeof(float));
        e->set_tensor_begin(static_cast<uint64_t>(lo - tb));
        e->set_count(static_cast<uint64_t>(hi - lo));
      }
    }
  }
}

void ShardPlan::pack(int rank, std::span<const float* const> buffers,
                     const std::function<void(const void*, size_t)>& sink,
                     std::span<const int64_t> begins) const {
  if (buffers.size() != states_.size() || (!begins.empty() && begins.size() != buffers.size())) {
    throw InvalidArgument("ShardPlan::pack needs one buffer per state");
  }
  const auto [a, b] = range(rank);
  for (size_t si = 0; si < buffers.size(); ++si) {
    const float* base = buffers[si];
    const int64_t first = begins.empty() ? 0 : begins[si];
    // The first tensor that ends after a (tensors_ is sorted by packed_begin).
    auto it = std::upper_bound(tensors_.begin(), tensors_.end(), a,
                               [](int64_t x, const Tensor& t) { return x < t.packed_begin; });
    if (it != tensors_.begin()) --it;
    for (; it != tensors_.end() && it->packed_begin < b; ++it) {
      const int64_t tb = it->packed_begin, te = tb + it->entry->numel();
      const int64_t lo = std::max(a, tb), hi = std::min(b, te);
      if (lo >= hi) continue;
      sink(base + (it->entry->offset + (lo - tb) - first),
           static_cast<size_t>(hi - lo) * sizeof(float));
    }
  }
}

}  // namespace etr
