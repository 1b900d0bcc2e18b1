#include "examples/gpt/head_layer.h"

namespace etr::gpt {

template <typename Real>
void HeadLayer<Real>::declare(ParamLayout& layout, int index) {
  layout.add("ln_f.weight", Shape{c_.d_model}, index, false);
  layout.add("ln_f.bias", Shape{c_.d_model}, index, false);
}

template <typename Real>
void HeadLayer<Real>::bind(const ParamLayout& layout, Real* params, Acc* grads) {
  const int64_t w = layout.find("ln_f.weight")->offset, b = layout.find("ln_f.bias")->offset;
  const int64_t wte = layout.find("wte.weight")->offset;
  w_ = params + w;
  b_ = params + b;
  wte_ = params + wte;
  dw_ = grads + w;
  db_ = grads + b;
  dwte_ = grads + wte;
}

template <typename Real>
int64_t HeadLayer<Real>::activation_numel(int64_t B, int64_t T) const {
  const int64_t N = B * T;
  return numel_as<Real>(N * c_.d_model) + 3 * numel_as<Real, Acc>(N) +
         numel_as<Real>(N * c_.padded_vocab());
}

template <typename Real>
void HeadLayer<Real>::plan(Real* p, int64_t B, int64_t T) {
  const int64_t N = B * T;
  ActivationCarver<Real> c(p);
  lnf_ = c.take(N * c_.d_model);
  mean_ = c.template take<Acc>(N);
  rstd_ = c.template take<Acc>(N);
  losses_ = c.template take<Acc>(N);
  logits_ = c.take(N * c_.padded_vocab());
}

template <typename Real>
void HeadLayer<Real>::forward(const Real* x, const Batch& b) {
  const int64_t N = b.B * b.T, C = c_.d_model, V = c_.vocab_size, Vp = c_.padded_vocab();
  const auto& k = this->k();
  k.layernorm_forward(lnf_, mean_, rstd_, x, w_, b_, N, C, kLayerNormEps);
  k.matmul_forward(logits_, lnf_, wte_, static_cast<const Real*>(nullptr), N, C, Vp);
  if (!b.targets) return;
  if (b.dloss != 0) {
    k.softmax_xent_forward_backward(losses_, logits_, logits_, b.targets,
                                       static_cast<Acc>(b.dloss), N, V, Vp);
  } else {
    k.softmax_xent_forward(losses_, logits_, b.targets, N, V, Vp);
  }
}

template <typename Real>
void HeadLayer<Real>::backward(const Real* x, const Real*, Real* din, Real* scratch,
                               const Batch& b) {
  backward_path(x, din, scratch, b, true);
}

template <typename Real>
void HeadLayer<Real>::backward_input(const Real* x, const Real*, Real* din, Real* scratch,
                                     const Batch& b) {
  backward_path(x, din, scratch, b, false);
}

template <typename Real>
void HeadLayer<Real>::backward_weight(const Real*, Real*, const Batch& b) {
  // dwte [Vp, C] += dlogits^T . lnf: the logits buffer still holds dlogits [N, Vp].
  this->k().matmul_backward(static_cast<Real*>(nullptr), dwte_, static_cast<Acc*>(nullptr),
                            logits_, lnf_, wte_, b.B * b.T, c_.d_model, c_.padded_vocab());
}

template <typename Real>
void HeadLayer<Real>::backward_path(const Real* x, Real* din, Real* scratch, const Batch& b,
                                    bool weights) {
  const int64_t N = b.B * b.T, C = c_.d_model;
  Real* dlnf = scratch;  // [N, C]
  const auto& k = this->k();
  k.fill(dlnf, Real(0), N * C);
  // With a sink (blocked gradients) dlnf first, then dwte's rows through it (the tied wte
  // is the embedding's: the sink reduces the head's share apart).
  GradSink* sink = weights ? this->grad_sink() : nullptr;
  k.matmul_backward(dlnf, sink ? nullptr : (weights ? dwte_ : nullptr), static_cast<Acc*>(nullptr),
                    logits_, lnf_, wte_, N, C, c_.padded_vocab());
  if (sink) this->linear_param_grads(sink, dwte_, nullptr, logits_, lnf_, wte_, N, C, c_.padded_vocab());
  this->whole_param_grads(sink, dw_, db_ + C, [&] {
    k.layernorm_backward(din, dw_, db_, dlnf, x, w_, mean_, rstd_, N, C);
  });
}

template class HeadLayer<float>;
template class HeadLayer<double>;
template class HeadLayer<bf16>;

}  // namespace etr::gpt
