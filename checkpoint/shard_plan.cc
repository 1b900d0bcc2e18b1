#include "checkpoint/shard_plan.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "checkpoint/extent_runs.h"
#include "runtime/error.h"

namespace etr {

std::vector<StatePiece> pieces_of(const NamedState& s, int64_t numel) {
  if (!s.pieces.empty()) return s.pieces;
  return {StatePiece{s.begin, std::max(s.begin, numel), s.data}};
}

ShardPlan::ShardPlan(const ParamLayout& layout, int world, std::vector<std::string> states,
                     const ShardOwners* owners)
    : layout_(layout), world_(world), states_(std::move(states)) {
  if (world < 1) throw InvalidArgument("a checkpoint needs at least one writer");
  for (const TensorEntry& e : layout.entries()) {
    if (e.dtype != DType::kF32) {
      throw InvalidArgument("checkpoints store f32 state; tensor " + e.name + " is not f32");
    }
    tensors_.push_back(Tensor{&e, packed_numel_});
    packed_numel_ += e.numel();
  }
  if (owners != nullptr) {
    own(*owners);
    return;
  }
  packed_.resize(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const auto [a, b] = range(r);
    if (a < b) packed_[static_cast<size_t>(r)].push_back({a, b});
  }
}

// The owners' flat ranges as packed ranges (padding dropped, neighbours joined), checked
// to cover the packed state once.
void ShardPlan::own(const ShardOwners& owners) {
  if (static_cast<int>(owners.size()) != world_) {
    throw InvalidArgument("a checkpoint's owners name " + std::to_string(owners.size()) +
                          " ranks for " + std::to_string(world_) + " writers");
  }
  packed_.resize(owners.size());
  std::vector<std::pair<int64_t, int64_t>> all;
  for (size_t r = 0; r < owners.size(); ++r) {
    auto& mine = packed_[r];
    for (const auto& [fa, fb] : owners[r]) {
      // The first tensor that ends after fa (entries are in flat order).
      auto it = std::upper_bound(
          tensors_.begin(), tensors_.end(), fa,
          [](int64_t x, const Tensor& t) { return x < t.entry->offset + t.entry->numel(); });
      for (; it != tensors_.end() && it->entry->offset < fb; ++it) {
        const int64_t off = it->entry->offset, lo = std::max(fa, off);
        const int64_t hi = std::min(fb, off + it->entry->numel());
        if (lo >= hi) continue;
        const int64_t pa = it->packed_begin + (lo - off), pb = it->packed_begin + (hi - off);
        if (!mine.empty() && mine.back().second == pa) {
          mine.back().second = pb;
        } else {
          mine.push_back({pa, pb});
        }
      }
    }
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  int64_t at = 0;
  for (const auto& [a, b] : all) {
    if (a != at) break;
    at = b;
  }
  if (at != packed_numel_) {
    throw InvalidArgument("a checkpoint's owners do not cover every element of the state once");
  }
}

std::pair<int64_t, int64_t> ShardPlan::range(int rank) const {
  // P r / N without overflow for any realistic P (< 2^50) and N (< 2^13).
  const auto at = [&](int r) {
    return static_cast<int64_t>((static_cast<__int128>(packed_numel_) * r) / world_);
  };
  return {at(rank), at(rank + 1)};
}

std::vector<ShardPlan::Tensor>::const_iterator ShardPlan::tensor_at(int64_t p) const {
  // The last tensor starting at or before p (tensors_ is sorted by packed_begin); an empty
  // one never holds p, and the one after it starts at the same place.
  auto it = std::upper_bound(tensors_.begin(), tensors_.end(), p,
                             [](int64_t x, const Tensor& t) { return x < t.packed_begin; });
  return --it;
}

std::pair<int64_t, int64_t> ShardPlan::flat_range(int rank) const {
  const auto [a, b] = range(rank);
  if (a >= b) return {0, 0};
  // The flat offset of packed element p.
  const auto flat = [&](int64_t p) {
    auto it = tensor_at(p);
    return it->entry->offset + (p - it->packed_begin);
  };
  return {flat(a), flat(b - 1) + 1};
}

uint64_t ShardPlan::file_bytes(int rank) const {
  int64_t n = 0;
  for (const auto& [a, b] : packed_pieces(rank)) n += b - a;
  return static_cast<uint64_t>(n) * sizeof(float) * states_.size();
}

std::string ShardPlan::file_name(int rank) const {
  char name[64];
  std::snprintf(name, sizeof name, "shard-%05d-of-%05d.bin", rank, world_);
  return name;
}

void ShardPlan::describe(ckpt::Manifest& manifest) const {
  Described& d = *described_;
  std::call_once(d.once, [&] { describe_into(d.records); });
  manifest.mutable_states()->MergeFrom(d.records.states());
  manifest.mutable_tensors()->MergeFrom(d.records.tensors());
}

void ShardPlan::describe_into(ckpt::Manifest& manifest) const {
  struct Piece {
    int64_t begin, end;  // packed
    int rank;
    int64_t at;         // its first element's place in the rank's range of a state
    int64_t per_state;  // the rank's elements of each state
  };
  std::vector<Piece> pieces;
  for (int r = 0; r < world_; ++r) {
    int64_t at = 0;
    for (const auto& [a, b] : packed_pieces(r)) {
      pieces.push_back({a, b, r, at, 0});
      at += b - a;
    }
    for (size_t i = pieces.size(); i-- > 0 && pieces[i].rank == r;) pieces[i].per_state = at;
  }
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& x, const Piece& y) { return x.begin < y.begin; });
  for (const std::string& s : states_) manifest.add_states(s);
  for (size_t si = 0; si < states_.size(); ++si) {
    for (const Tensor& t : tensors_) {
      ckpt::TensorRecord* rec = manifest.add_tensors();
      rec->set_name(t.entry->name);
      rec->set_state(states_[si]);
      rec->set_dtype("f32");
      for (int d = 0; d < t.entry->shape.ndim(); ++d) rec->add_shape(t.entry->shape[d]);
      const int64_t tb = t.packed_begin, te = tb + t.entry->numel();
      auto it = std::upper_bound(pieces.begin(), pieces.end(), tb,
                                 [](int64_t x, const Piece& p) { return x < p.begin; });
      if (it != pieces.begin()) --it;
      for (; it != pieces.end() && it->begin < te; ++it) {
        const int64_t lo = std::max(it->begin, tb), hi = std::min(it->end, te);
        if (lo >= hi) continue;
        const int64_t in_file =
            static_cast<int64_t>(si) * it->per_state + it->at + (lo - it->begin);
        append_extent(*rec, {it->rank, static_cast<uint64_t>(in_file) * sizeof(float),
                             static_cast<uint64_t>(lo - tb), static_cast<uint64_t>(hi - lo)});
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
  std::vector<std::vector<StatePiece>> sources;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const int64_t first = begins.empty() ? 0 : begins[i];
    sources.push_back({StatePiece{first, std::numeric_limits<int64_t>::max(), buffers[i]}});
  }
  pack(rank, sources, sink);
}

void ShardPlan::pack(int rank, std::span<const std::vector<StatePiece>> sources,
                     const std::function<void(const void*, size_t)>& sink) const {
  if (sources.size() != states_.size()) {
    throw InvalidArgument("ShardPlan::pack needs one buffer per state");
  }
  for (const std::vector<StatePiece>& src : sources) {
    // Flat [lo, hi) from the pieces that hold it.
    const auto emit = [&](int64_t lo, int64_t hi) {
      // The last piece that begins at or before lo, then the ones after it.
      auto p = std::upper_bound(src.begin(), src.end(), lo,
                                [](int64_t x, const StatePiece& s) { return x < s.begin; });
      if (p != src.begin()) --p;
      while (lo < hi) {
        if (p == src.end() || p->begin > lo || p->end <= lo) {
          throw InvalidArgument("a checkpoint's state lacks elements its writer packs");
        }
        const int64_t n = std::min(hi, p->end) - lo;
        sink(p->data + (lo - p->begin), static_cast<size_t>(n) * sizeof(float));
        lo += n;
        ++p;
      }
    };
    for (const auto& [a, b] : packed_pieces(rank)) {
      for (auto it = tensor_at(a); it != tensors_.end() && it->packed_begin < b; ++it) {
        const int64_t tb = it->packed_begin, te = tb + it->entry->numel();
        const int64_t lo = std::max(a, tb), hi = std::min(b, te);
        if (lo < hi) emit(it->entry->offset + (lo - tb), it->entry->offset + (hi - tb));
      }
    }
  }
}

std::vector<StatePiece> owned_pieces(const NamedState& s, const ParamLayout& layout, int world,
                                     int rank) {
  std::vector<std::pair<int64_t, int64_t>> owned;
  if (s.owners) {
    owned = s.owners->at(static_cast<size_t>(rank));
  } else {
    owned.push_back(ShardPlan(layout, world, {s.name}).flat_range(rank));
  }
  const std::vector<StatePiece> held = pieces_of(s, layout.numel());
  std::vector<StatePiece> out;
  for (const auto& [a, b] : owned) {
    for (const StatePiece& p : held) {
      const int64_t lo = std::max(a, p.begin), hi = std::min(b, p.end);
      if (lo < hi) out.push_back({lo, hi, p.data + (lo - p.begin)});
    }
  }
  return out;
}

struct ShardPlanCache::Entry {
  ParamLayout layout;  // a copy: the plan refers to it
  int world = 0;
  std::vector<std::string> states;
  std::shared_ptr<const ShardOwners> owners;
  std::unique_ptr<const ShardPlan> plan;
};

namespace {

bool same_layout(const ParamLayout& a, const ParamLayout& b) {
  if (a.numel() != b.numel() || a.entries().size() != b.entries().size()) return false;
  for (size_t i = 0; i < a.entries().size(); ++i) {
    const TensorEntry &x = a.entries()[i], &y = b.entries()[i];
    if (x.name != y.name || x.offset != y.offset || !(x.shape == y.shape)) return false;
  }
  return true;
}

}  // namespace

std::shared_ptr<const ShardPlan> ShardPlanCache::get(const ParamLayout& layout, int world,
                                                     const std::vector<std::string>& states,
                                                     std::shared_ptr<const ShardOwners> owners) {
  if (!last_ || last_->world != world || last_->states != states || last_->owners != owners ||
      !same_layout(last_->layout, layout)) {
    auto e = std::make_shared<Entry>();
    e->layout = layout;
    e->world = world;
    e->states = states;
    e->owners = std::move(owners);
    e->plan = std::make_unique<const ShardPlan>(e->layout, world, states, e->owners.get());
    last_ = std::move(e);
  }
  return std::shared_ptr<const ShardPlan>(last_, last_->plan.get());
}

}  // namespace etr
