#include "parallel/pipeline_stage.h"

#include "runtime/error.h"

namespace etr {
namespace {

int vstage_of(const std::vector<int>& bounds, int layer) {
  for (size_t j = 0; j + 1 < bounds.size(); ++j) {
    if (layer >= bounds[j] && layer < bounds[j + 1]) return static_cast<int>(j);
  }
  throw InvalidArgument("layer " + std::to_string(layer) + " is in no pipeline stage");
}

}  // namespace

PipelineCut::PipelineCut(const LayerStack<float>& model, std::vector<int> bounds, int stages, bool v_shape)
    : model_(model), stages_(stages), v_shape_(v_shape), bounds_(std::move(bounds)) {
  const int parts = static_cast<int>(bounds_.size()) - 1;
  bool ok = stages_ >= 1 && parts >= stages_ && parts % stages_ == 0 && bounds_.front() == 0 &&
            bounds_.back() == model_.size() && (!v_shape_ || parts == 2 * stages_);
  for (int j = 0; ok && j < parts; ++j) ok = bounds_[j] < bounds_[j + 1];
  if (!ok) {
    throw InvalidArgument("the pipeline boundaries do not cut " + std::to_string(model_.size()) +
                          " layers into " + std::to_string(parts) + " non-empty parts");
  }
  borrowed_.resize(static_cast<size_t>(parts));
  for (const SharedParam& s : model_.shared()) {
    const int owner = vstage_of(bounds_, s.owner), user = vstage_of(bounds_, s.user);
    if (owner == user) continue;
    ties_.push_back(Tie{s.name, owner, user});
    borrowed_[static_cast<size_t>(user)].push_back(*model_.layout().find(s.name));
  }
}

std::unique_ptr<LayerStack<float>> PipelineCut::make_chunk(
    std::vector<std::unique_ptr<Layer<float>>>& layers, int j) const {
  const int first = bounds_.at(j), end = bounds_.at(j + 1);
  std::vector<std::unique_ptr<Layer<float>>> mine;
  for (int i = first; i < end; ++i) mine.push_back(std::move(layers.at(i)));
  auto chunk = std::make_unique<LayerStack<float>>(std::move(mine), borrowed_[j]);
  for (const SharedParam& s : model_.shared()) {
    const bool user_here = s.user >= first && s.user < end;
    if (!user_here || s.user == first) continue;  // a borrowed tensor is layer 0's already
    const bool owner_here = s.owner >= first && s.owner < end;
    chunk->share(s.name, owner_here ? s.owner - first : 0, s.user - first);
  }
  // The own tensors must sit where own_offset() says.
  for (const TensorEntry& e : chunk->layout().entries()) {
    const TensorEntry* m = model_.layout().find(e.name);
    const bool borrowed = e.offset < borrowed_numel(j);
    if (!m || !(m->shape == e.shape) ||
        (!borrowed && m->offset - own_offset(j) != e.offset)) {
      throw InvalidArgument("pipeline chunk " + std::to_string(j) + ": tensor " + e.name +
                            " is not laid out as in the whole model");
    }
  }
  return chunk;
}

int64_t PipelineCut::borrowed_numel(int j) const {
  ParamLayout l;
  for (const TensorEntry& e : borrowed_.at(j)) l.add(e.name, e.shape, 0, e.weight_decay, e.dtype);
  return l.numel();
}

// From the first tensor of the part's layers to the end of its last one: the alignment
// padding before the next part's first tensor is no part's (a chunk's own layout ends at
// its last tensor, so a range up to the next part's start would overrun it).
std::pair<int64_t, int64_t> PipelineCut::own_range(int j) const {
  const ParamLayout& l = model_.layout();
  int64_t begin = -1, end = -1;
  for (int i = bounds_.at(j); i < bounds_.at(j + 1); ++i) {
    const auto [a, b] = l.layer_range(i);
    if (a == b) continue;
    if (begin < 0) begin = a;
    end = b;
  }
  if (begin >= 0) return {begin, end};
  // A part without parameters: an empty range where the next tensor would be.
  for (int i = bounds_.at(j + 1); i < model_.size(); ++i) {
    const auto [a, b] = l.layer_range(i);
    if (a != b) return {a, a};
  }
  return {l.numel(), l.numel()};
}

int64_t PipelineCut::own_offset(int j) const { return own_range(j).first - borrowed_numel(j); }

int64_t PipelineCut::input_numel(int j, int64_t B, int64_t T) const {
  if (j == 0) return 0;
  return model_.layer(bounds_.at(j) - 1).output_numel(B, T);
}

}  // namespace etr
