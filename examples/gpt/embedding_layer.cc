#include "examples/gpt/embedding_layer.h"

namespace etr::gpt {

template <typename Real>
void EmbeddingLayer<Real>::declare(ParamLayout& layout, int index) {
  layout.add("wte.weight", Shape{c_.padded_vocab(), c_.d_model}, index, true);
  layout.add("wpe.weight", Shape{c_.seq_len, c_.d_model}, index, true);
}

template <typename Real>
void EmbeddingLayer<Real>::bind(const ParamLayout& layout, Real* params, Acc* grads) {
  const int64_t wte = layout.find("wte.weight")->offset, wpe = layout.find("wpe.weight")->offset;
  wte_ = params + wte;
  wpe_ = params + wpe;
  dwte_ = grads + wte;
  dwpe_ = grads + wpe;
}

template <typename Real>
void EmbeddingLayer<Real>::forward(const Real*, const Batch& b) {
  this->k().encoder_forward(out_, b.tokens, wte_, wpe_, b.B, b.T, c_.d_model, c_.vocab_size);
}

template <typename Real>
void EmbeddingLayer<Real>::backward(const Real*, const Real* dout, Real*, Real*,
                                    const Batch& b) {
  const auto k = this->k();
  const int64_t C = c_.d_model, V = c_.vocab_size;
  GradSink* sink = this->grad_sink();
  if (!sink) return k.encoder_backward(dwte_, dwpe_, dout, b.tokens, b.B, b.T, C, V);
  // Blocked gradients: wpe (above wte in the layout) first, then wte, rows at a time.
  sink->rows(dwpe_, c_.seq_len, C, [&](int64_t r0, int64_t r1) {
    k.encoder_backward_rows(static_cast<Acc*>(nullptr), dwpe_, dout, b.tokens, b.B, b.T, C, V, r0, r1);
  });
  sink->rows(dwte_, c_.padded_vocab(), C, [&](int64_t r0, int64_t r1) {
    k.encoder_backward_rows(dwte_, static_cast<Acc*>(nullptr), dout, b.tokens, b.B, b.T, C, V, r0, r1);
  });
}

template <typename Real>
void EmbeddingLayer<Real>::backward_input(const Real*, const Real* dout, Real*, Real*,
                                          const Batch& b) {
  this->k().copy(dout_, dout, b.B * b.T * c_.d_model);
}

template <typename Real>
void EmbeddingLayer<Real>::backward_weight(const Real*, Real*, const Batch& b) {
  this->k().encoder_backward(dwte_, dwpe_, dout_, b.tokens, b.B, b.T, c_.d_model, c_.vocab_size);
}

template class EmbeddingLayer<float>;
template class EmbeddingLayer<double>;
template class EmbeddingLayer<bf16>;

}  // namespace etr::gpt
