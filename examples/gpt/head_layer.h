// HeadLayer: final LayerNorm, the LM head tied to the token embedding, and the fused
// softmax cross-entropy: GPT-2's last layer.
//
//   params       ln_f.weight [C], ln_f.bias [C]; reads wte [Vp, C] (the embedding's) and
//                accumulates its gradient there
//   activations  lnf [N, C], lnf_mean [N], lnf_rstd [N], logits [N, Vp], losses [N]
//   scratch      dlnf [N, C]
// With targets and dloss != 0, forward also writes dlogits over the logits (the fused
// kernel), which backward consumes; without targets it leaves the logits for sampling.
// Split backward (runtime/layer.h): B = din through ln_f (and ln_f's gradients), from
// dlnf = dlogits . wte; W = dwte += dlogits^T . lnf. Both read only activations (logits,
// lnf): no split storage.
#pragma once

#include "examples/gpt/gpt_config.h"
#include "runtime/layer.h"

namespace etr::gpt {

template <typename Real>
class HeadLayer final : public Layer<Real> {
 public:
  using Acc = accum_t<Real>;
  explicit HeadLayer(const GptConfig& c) : c_(c) {}
  std::string name() const override { return "ln_f"; }
  void declare(ParamLayout& layout, int index) override;
  void bind(const ParamLayout& layout, Real* params, Acc* grads) override;
  int64_t activation_numel(int64_t B, int64_t T) const override;
  int64_t scratch_numel(int64_t B, int64_t T) const override { return B * T * c_.d_model; }
  void plan(Real* activations, int64_t B, int64_t T) override;
  int64_t output_numel(int64_t B, int64_t T) const override { return B * T; }
  // The losses [N] (in Acc: fp32 under mixed precision, where output() is null).
  const Real* output() const override {
    if constexpr (std::is_same_v<Acc, Real>) {
      return losses_;
    } else {
      return nullptr;
    }
  }
  const Acc* losses() const override { return losses_; }
  const Real* logits() const { return logits_; }  // [N, Vp], after a forward without targets
  void forward(const Real* in, const Batch& batch) override;
  void backward(const Real* in, const Real* dout, Real* din, Real* scratch,
                const Batch& batch) override;
  bool supports_split_backward() const override { return true; }
  bool writes_grads_through_sink() const override { return true; }
  void backward_input(const Real* in, const Real* dout, Real* din, Real* scratch,
                      const Batch& batch) override;
  void backward_weight(const Real* in, Real* scratch, const Batch& batch) override;

 private:
  // backward's input path: din, ln_f's gradients, and with `weights` dwte.
  void backward_path(const Real* x, Real* din, Real* scratch, const Batch& batch, bool weights);

  GptConfig c_;
  const Real *w_ = nullptr, *b_ = nullptr, *wte_ = nullptr;
  Acc *dw_ = nullptr, *db_ = nullptr, *dwte_ = nullptr;
  Real *lnf_ = nullptr, *logits_ = nullptr;
  Acc *mean_ = nullptr, *rstd_ = nullptr, *losses_ = nullptr;
};

}  // namespace etr::gpt
