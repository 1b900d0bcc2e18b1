// Cutting a model into pipeline chunks (docs/design.md, "The training engine": the stage seam).
//
// A model of n layers is cut at boundaries b[0] = 0 < ... < b[P v] = n into P v
// contiguous parts, the virtual stages j = c P + s (rank s of the pp group holds chunks
// c = 0..v-1; v = 1 without interleaving), or in a V (ZB-V: v = 2, rank s holds virtual
// stages s and 2P-1-s). A chunk is a LayerStack of its layers with a
// layout of its own: the layers' tensors in the model's order, so a tensor's offset in the
// chunk is its offset in the model minus the chunk's first offset (own_offset()), and
// before them the tensors it borrows: a parameter shared between layers (GPT-2's tied
// wte, owned by the embedding, read by the head) whose owner is in another chunk is
// declared again in the user's chunk (LayerStack's borrowed tensors).
//
// Tied parameters across chunks (a Tie): both copies start equal; at the user's final
// backward its local gradient goes to the owner, which adds it before its data-parallel
// reduction; after the step's reductions the user's copy takes the owner's reduced
// gradient (PipelineEngine::sync_ties), so both take the same update at any dp.
// The user's copy is left out of the gradient norm (DataParallelOptions::norm_begin) and
// out of checkpoints (the owner saves it).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/layer_stack.h"

namespace etr {

// A parameter read by a chunk that does not own it.
struct Tie {
  std::string name;
  int owner_vstage = 0;  // the virtual stage of the layer that declares it
  int user_vstage = 0;   // the virtual stage of a layer that reads it
};

class PipelineCut {
 public:
  // `model`: the whole model's stack (its layout, sharing and layers' sizes are read;
  // its layers stay). `bounds`: P v + 1 layer boundaries. InvalidArgument when they do
  // not cut model.size() layers into non-empty parts.
  // `v_shape`: ZB-V's placement (2 P parts).
  PipelineCut(const LayerStack<float>& model, std::vector<int> bounds, int stages, bool v_shape = false);

  int stages() const { return stages_; }
  int virtual_stages() const { return static_cast<int>(bounds_.size() - 1) / stages_; }
  const std::vector<int>& bounds() const { return bounds_; }
  // Virtual stage of chunk `chunk` on stage `stage`, and the stage of virtual stage j.
  int vstage(int stage, int chunk) const {
    return v_shape_ && chunk == 1 ? 2 * stages_ - 1 - stage : chunk * stages_ + stage;
  }
  int stage_of(int j) const { return v_shape_ && j >= stages_ ? 2 * stages_ - 1 - j : j % stages_; }
  int num_vstages() const { return static_cast<int>(bounds_.size()) - 1; }
  // Ties between different virtual stages.
  const std::vector<Tie>& ties() const { return ties_; }

  // The chunk stack of virtual stage j, made of layers [bounds[j], bounds[j+1]) taken
  // from `layers` (a fresh instance of the model's layers, all n of them; the taken ones
  // are moved out).
  std::unique_ptr<LayerStack<float>> make_chunk(std::vector<std::unique_ptr<Layer<float>>>& layers,
                                                int j) const;
  // Elements at the front of virtual stage j's layout that are borrowed copies.
  int64_t borrowed_numel(int j) const;
  // Element i of the model's layout, for i in virtual stage j's own range, is element
  // i - own_offset(j) of the chunk's layout.
  int64_t own_offset(int j) const;
  // [begin, end) of the model's layout that virtual stage j owns: from its first tensor to
  // the end of its last (the alignment padding after it is no stage's).
  std::pair<int64_t, int64_t> own_range(int j) const;
  // Elements the first layer of virtual stage j reads as input (the previous one's last
  // layer's output) for micro-batches of B x T; 0 for j = 0.
  int64_t input_numel(int j, int64_t B, int64_t T) const;

 private:
  const LayerStack<float>& model_;
  int stages_;
  bool v_shape_;
  std::vector<int> bounds_;
  std::vector<Tie> ties_;
  std::vector<std::vector<TensorEntry>> borrowed_;  // per virtual stage
};

}  // namespace etr
