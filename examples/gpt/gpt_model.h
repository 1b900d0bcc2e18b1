// GptModel: GPT-2 as an ordered stack of layers over flat buffers (DESIGN.md).
//
//   layer 0            EmbeddingLayer    wte, wpe
//   layers 1..L        TransformerBlock  h.0 .. h.{L-1}
//   layer L+1          HeadLayer         ln_f (LM head tied to wte)
//
// Buffers (from the budgeted allocator):
//   params, grads      [layout().numel()]  one flat buffer each, same layout
//   activations        sum of the layers' activation_numel(B, T), planned by plan()
//   scratch            max of the layers' scratch_numel(B, T) + two [B, T, C] buffers for
//                      the residual stream's gradient (ping-pong between layers)
// so the memory of a micro-batch size is known before the first step (activation_bytes).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "examples/gpt/gpt_config.h"
#include "examples/gpt/head_layer.h"
#include "runtime/allocator.h"
#include "runtime/layer.h"
#include "runtime/param_layout.h"
#include "runtime/trace.h"

namespace etr::gpt {

template <typename Real>
class GptModel {
 public:
  GptModel(const GptConfig& config, Allocator& alloc);

  const GptConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  const std::vector<std::unique_ptr<Layer<Real>>>& layers() const { return layers_; }
  Real* params() const { return static_cast<Real*>(params_.data()); }
  Real* grads() const { return static_cast<Real*>(grads_.data()); }

  // GPT-2's initialisation: weights N(0, std_dev), the residual output projections
  // (attn.c_proj, mlp.c_proj) N(0, std_dev / sqrt(2 n_layer)), biases 0, LayerNorm weights
  // 1. GPT-2's std_dev is 0.02 (model.init_std); InvalidArgument unless finite and > 0.
  // Deterministic in `seed`; the vocabulary padding rows stay 0.
  void init(uint64_t seed, double std_dev = 0.02);

  // Bytes of activations + scratch for micro-batches of B x T (no allocation).
  size_t activation_bytes(int64_t B, int64_t T) const;
  // Allocates activations for micro-batches of up to B x T (throws OutOfMemory).
  void plan(int64_t B, int64_t T);

  // Runs the stack; with targets returns the mean loss over the batch's B x T positions.
  double forward(const Batch& batch);
  // Accumulates into grads() the gradient of sum(losses) x batch.dloss; needs the forward
  // of the same batch with the same dloss just before. `on_layer_final(i)` is called as
  // soon as layer i's backward has returned (i = last layer .. 0): from then on nothing
  // writes layer i's gradients in this call (the head's tied LM weight lives in layer 0,
  // the embedding, whose backward comes last), so a data-parallel reducer may send them.
  void backward(const Batch& batch, const std::function<void(int)>& on_layer_final = {});
  void zero_grads();
  // Logits [B, T, Vp] of the last forward without targets.
  const Real* logits() const { return head_->logits(); }
  // Records forward/backward of every layer on `tracer`'s compute track (null: none).
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }

 private:
  GptConfig config_;
  Allocator& alloc_;
  ParamLayout layout_;
  std::vector<std::unique_ptr<Layer<Real>>> layers_;
  HeadLayer<Real>* head_ = nullptr;
  Buffer params_, grads_, activations_, scratch_;
  int64_t planned_B_ = 0, planned_T_ = 0;
  Tracer* tracer_ = nullptr;
  std::vector<std::string> forward_names_, backward_names_;  // "forward h.3", per layer
};

}  // namespace etr::gpt
