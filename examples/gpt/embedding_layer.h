// EmbeddingLayer: token + learned position embedding, GPT-2's first layer.
//
//   params   wte [Vp, C] (tied to the LM head), wpe [maxT, C]
//   output   [B, T, C] = wte[tokens] + wpe[t]
//
// Split backward (runtime/layer.h): B has nothing to compute (no input gradient) and
// keeps dout [N, C] (its split storage, N = B T); W = the encoder backward into dwte, dwpe
// from it. (W, not B: the tied dwte then accumulates the head's and this layer's part of
// each micro-batch in backward()'s order.)
#pragma once

#include "examples/gpt/gpt_config.h"
#include "runtime/layer.h"

namespace etr::gpt {

template <typename Real>
class EmbeddingLayer final : public Layer<Real> {
 public:
  using Acc = accum_t<Real>;
  explicit EmbeddingLayer(const GptConfig& c) : c_(c) {}
  std::string name() const override { return "embedding"; }
  void declare(ParamLayout& layout, int index) override;
  void bind(const ParamLayout& layout, Real* params, Acc* grads) override;
  int64_t output_numel(int64_t B, int64_t T) const override { return B * T * c_.d_model; }
  int64_t activation_numel(int64_t B, int64_t T) const override {
    return numel_as<Real>(B * T * c_.d_model);
  }
  int64_t scratch_numel(int64_t, int64_t) const override { return 0; }
  void plan(Real* activations, int64_t, int64_t) override { out_ = activations; }
  const Real* output() const override { return out_; }
  void forward(const Real* in, const Batch& batch) override;
  void backward(const Real* in, const Real* dout, Real* din, Real* scratch,
                const Batch& batch) override;
  bool supports_split_backward() const override { return true; }
  bool writes_grads_through_sink() const override { return true; }
  int64_t split_numel(int64_t B, int64_t T) const override {
    return numel_as<Real>(B * T * c_.d_model);
  }
  void plan_split(Real* storage, int64_t, int64_t) override { dout_ = storage; }
  void backward_input(const Real* in, const Real* dout, Real* din, Real* scratch,
                      const Batch& batch) override;
  void backward_weight(const Real* in, Real* scratch, const Batch& batch) override;

 private:
  GptConfig c_;
  const Real* wte_ = nullptr;
  const Real* wpe_ = nullptr;
  Acc* dwte_ = nullptr;
  Acc* dwpe_ = nullptr;
  Real* out_ = nullptr;
  Real* dout_ = nullptr;  // split storage: [N, C], the gradient handed to backward_input
};

}  // namespace etr::gpt
