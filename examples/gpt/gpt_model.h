// GPT-2 as an ordered stack of layers (docs/design.md, "The training engine": the stage seam).
//
//   layer 0            EmbeddingLayer    wte, wpe
//   layers 1..L        TransformerBlock  h.0 .. h.{L-1}
//   layer L+1          HeadLayer         ln_f (LM head tied to wte: shared with layer 0)
//
// build_stack() is what a training program hands to etr's loop (parallel/train_session.h);
// init_params() is GPT-2's initialisation of a flat parameter buffer. GptModel owns a
// stack and its two flat buffers (params, grads) for the programs and tests that run one
// model in one process (etr-ckpt export, the gradient checks, the compat fixtures).
//
// Memory: params, grads [layout().numel()] each; activations and scratch as
// LayerStack::activation_bytes(B, T) says, planned before the first step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "examples/gpt/gpt_config.h"
#include "examples/gpt/head_layer.h"
#include "runtime/allocator.h"
#include "runtime/layer_stack.h"
#include "runtime/param_layout.h"
#include "runtime/trace.h"

namespace etr::gpt {

// GPT-2's layers for `config` (validated: ConfigError), with the tied wte declared shared
// between the embedding (owner) and the head (user).
template <typename Real>
std::unique_ptr<LayerStack<Real>> build_stack(const GptConfig& config);

// GPT-2's initialisation: weights N(0, std_dev), the residual output projections
// (attn.c_proj, mlp.c_proj) N(0, std_dev / sqrt(2 n_layer)), biases 0, LayerNorm weights
// 1. GPT-2's std_dev is 0.02 (model.init_std); InvalidArgument unless finite and > 0.
// Deterministic in `seed`; the vocabulary padding rows stay 0.
template <typename Real>
void init_params(const GptConfig& config, const ParamLayout& layout, Real* params, uint64_t seed,
                 double std_dev = 0.02);

template <typename Real>
class GptModel {
 public:
  GptModel(const GptConfig& config, Allocator& alloc);

  const GptConfig& config() const { return config_; }
  const ParamLayout& layout() const { return stack_->layout(); }
  LayerStack<Real>& stack() { return *stack_; }
  Real* params() const { return static_cast<Real*>(params_.data()); }
  Real* grads() const { return static_cast<Real*>(grads_.data()); }

  void init(uint64_t seed, double std_dev = 0.02) {
    init_params(config_, layout(), params(), seed, std_dev);
  }

  // Bytes of activations + scratch for micro-batches of B x T (no allocation).
  size_t activation_bytes(int64_t B, int64_t T) const { return stack_->activation_bytes(B, T); }
  // Allocates activations for micro-batches of up to B x T (throws OutOfMemory;
  // ConfigError when T is longer than the model's positions).
  void plan(int64_t B, int64_t T);

  // Runs the stack; with targets returns the mean loss over the batch's B x T positions.
  double forward(const Batch& batch) { return stack_->forward(batch); }
  // Accumulates into grads() the gradient of sum(losses) x batch.dloss; needs the forward
  // of the same batch with the same dloss just before. `on_layer_final(i)` is called as
  // soon as layer i's backward has returned (i = last layer .. 0).
  void backward(const Batch& batch, const std::function<void(int)>& on_layer_final = {});
  void zero_grads();
  // Logits [B, T, Vp] of the last forward without targets.
  const Real* logits() const { return head_->logits(); }
  // Records forward/backward of every layer on `tracer`'s compute track (null: none).
  void set_tracer(Tracer* tracer);

 private:
  GptConfig config_;
  Allocator& alloc_;
  std::unique_ptr<LayerStack<Real>> stack_;
  HeadLayer<Real>* head_ = nullptr;
  Buffer params_, grads_;
};

}  // namespace etr::gpt
