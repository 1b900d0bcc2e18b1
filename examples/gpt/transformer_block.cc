#include "examples/gpt/transformer_block.h"

namespace etr::gpt {

template <typename Real>
void TransformerBlock<Real>::declare(ParamLayout& layout, int index) {
  const int64_t C = c_.d_model;
  const std::string p = name() + ".";
  layout.add(p + "ln_1.weight", Shape{C}, index, false);
  layout.add(p + "ln_1.bias", Shape{C}, index, false);
  layout.add(p + "attn.c_attn.weight", Shape{3 * C, C}, index, true);
  layout.add(p + "attn.c_attn.bias", Shape{3 * C}, index, false);
  layout.add(p + "attn.c_proj.weight", Shape{C, C}, index, true);
  layout.add(p + "attn.c_proj.bias", Shape{C}, index, false);
  layout.add(p + "ln_2.weight", Shape{C}, index, false);
  layout.add(p + "ln_2.bias", Shape{C}, index, false);
  layout.add(p + "mlp.c_fc.weight", Shape{4 * C, C}, index, true);
  layout.add(p + "mlp.c_fc.bias", Shape{4 * C}, index, false);
  layout.add(p + "mlp.c_proj.weight", Shape{C, 4 * C}, index, true);
  layout.add(p + "mlp.c_proj.bias", Shape{C}, index, false);
}

template <typename Real>
void TransformerBlock<Real>::bind(const ParamLayout& layout, Real* params, Acc* grads) {
  static const char* kNames[kNumParams] = {
      "ln_1.weight",       "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
      "mlp.c_fc.weight",   "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  for (int i = 0; i < kNumParams; ++i) {
    const int64_t off = layout.find(name() + "." + kNames[i])->offset;
    p_[i] = params + off;
    g_[i] = grads + off;
  }
}

template <typename Real>
int64_t TransformerBlock<Real>::activation_numel(int64_t B, int64_t T) const {
  const int64_t N = B * T, C = c_.d_model;
  auto n = [](int64_t k) { return numel_as<Real>(k); };
  return 5 * n(N * C) + n(3 * N * C) + 2 * n(4 * N * C) +
         n(this->k().attention_saved_numel(B, T, C, c_.n_head)) + 4 * numel_as<Real, Acc>(N);
}

template <typename Real>
int64_t TransformerBlock<Real>::scratch_numel(int64_t B, int64_t T) const {
  const int64_t N = B * T, C = c_.d_model;
  return 15 * N * C + this->k().attention_backward_scratch_size(B, T, C, c_.n_head);
}

template <typename Real>
void TransformerBlock<Real>::plan(Real* p, int64_t B, int64_t T) {
  const int64_t N = B * T, C = c_.d_model;
  ActivationCarver<Real> c(p);
  a_.ln1 = c.take(N * C);
  a_.ln1_mean = c.template take<Acc>(N);
  a_.ln1_rstd = c.template take<Acc>(N);
  a_.qkv = c.take(3 * N * C);
  a_.atty = c.take(N * C);
  a_.att = c.take(this->k().attention_saved_numel(B, T, C, c_.n_head));
  a_.x1 = c.take(N * C);
  a_.ln2 = c.take(N * C);
  a_.ln2_mean = c.template take<Acc>(N);
  a_.ln2_rstd = c.template take<Acc>(N);
  a_.fch = c.take(4 * N * C);
  a_.fch_gelu = c.take(4 * N * C);
  a_.out = c.take(N * C);
}

template <typename Real>
void TransformerBlock<Real>::forward(const Real* x, const Batch& b) {
  const int64_t N = b.B * b.T, C = c_.d_model;
  const auto& k = this->k();
  k.layernorm_forward(a_.ln1, a_.ln1_mean, a_.ln1_rstd, x, p_[kLn1W], p_[kLn1B], N, C,
                      kLayerNormEps);
  k.matmul_forward(a_.qkv, a_.ln1, p_[kQkvW], p_[kQkvB], N, C, 3 * C);
  k.attention_forward(a_.atty, a_.att, a_.qkv, b.B, b.T, C, c_.n_head);
  // The attention projection lands in `out` for a moment, then x1 = x + it.
  k.matmul_forward(a_.out, a_.atty, p_[kProjW], p_[kProjB], N, C, C);
  k.residual_layernorm_forward(a_.x1, a_.ln2, a_.ln2_mean, a_.ln2_rstd, x, a_.out, p_[kLn2W],
                               p_[kLn2B], N, C, kLayerNormEps);
  k.matmul_gelu_forward(a_.fch, a_.fch_gelu, a_.ln2, p_[kFcW], p_[kFcB], N, C, 4 * C);
  k.matmul_forward(a_.out, a_.fch_gelu, p_[kFcProjW], p_[kFcProjB], N, 4 * C, C);
  k.residual_forward(a_.out, a_.x1, a_.out, N * C);
}

template <typename Real>
void TransformerBlock<Real>::backward(const Real* x, const Real* dout, Real* din, Real* scratch,
                                      const Batch& b) {
  const int64_t N = b.B * b.T, C = c_.d_model;
  // The matmul output gradients in their places of the scratch (see backward_path).
  const MatmulGrads g{scratch + 11 * N * C, scratch, scratch + 6 * N * C};
  backward_path(x, dout, g, din, scratch, b, true);
}

template <typename Real>
void TransformerBlock<Real>::plan_split(Real* p, int64_t B, int64_t T) {
  const int64_t N = B * T, C = c_.d_model;
  split_.dqkv = p;                        // [N, 3C]
  split_.dx1 = split_.dqkv + 3 * N * C;   // [N, C]
  split_.dfch = split_.dx1 + N * C;       // [N, 4C]
  split_dout_ = split_.dfch + 4 * N * C;  // [N, C]
}

template <typename Real>
void TransformerBlock<Real>::backward_input(const Real* x, const Real* dout, Real* din,
                                            Real* scratch, const Batch& b) {
  this->k().copy(split_dout_, dout, b.B * b.T * c_.d_model);
  backward_path(x, dout, split_, din, scratch, b, false);
}

template <typename Real>
void TransformerBlock<Real>::backward_weight(const Real*, Real*, const Batch& b) {
  const int64_t N = b.B * b.T, C = c_.d_model;
  const auto& k = this->k();
  Real* const none = nullptr;  // no input gradient: backward_input made it
  k.matmul_backward(none, g_[kFcProjW], g_[kFcProjB], split_dout_, a_.fch_gelu, p_[kFcProjW],
                    N, 4 * C, C);
  k.matmul_backward(none, g_[kFcW], g_[kFcB], split_.dfch, a_.ln2, p_[kFcW], N, C, 4 * C);
  k.matmul_backward(none, g_[kProjW], g_[kProjB], split_.dx1, a_.atty, p_[kProjW], N, C, C);
  k.matmul_backward(none, g_[kQkvW], g_[kQkvB], split_.dqkv, a_.ln1, p_[kQkvW], N, C, 3 * C);
}

template <typename Real>
void TransformerBlock<Real>::backward_path(const Real* x, const Real* dout, const MatmulGrads& g,
                                           Real* din, Real* scratch, const Batch& b,
                                           bool weights) {
  const int64_t N = b.B * b.T, C = c_.d_model;
  // scratch: dx1 [N, C] | dln2 [N, C] | dfch_gelu [N, 4C] | dfch [N, 4C] | datty [N, C] |
  //          dqkv [N, 3C] | dln1 [N, C] | attention's scratch
  // (the places of dx1, dfch and dqkv are unused when `g` points elsewhere). dx1 is
  // assigned below; the rest accumulate (+=): zeroed first.
  Real* dln2 = scratch + N * C;
  Real* dfch_gelu = dln2 + N * C;
  Real* datty = scratch + 10 * N * C;
  Real* dln1 = scratch + 14 * N * C;
  Real* attn_scratch = scratch + 15 * N * C;
  const int64_t attn_scratch_size = scratch_numel(b.B, b.T) - 15 * N * C;
  const auto& k = this->k();
  k.fill(dln2, Real(0), 5 * N * C);  // dln2, dfch_gelu
  k.fill(g.dfch, Real(0), 4 * N * C);
  k.fill(datty, Real(0), N * C);
  k.fill(g.dqkv, Real(0), 3 * N * C);
  k.fill(dln1, Real(0), N * C);
  auto dw = [&](Param p) { return weights ? g_[p] : nullptr; };  // the matmul's gradients
  // With a sink (blocked gradients) each matmul's input gradient first, then its weight and
  // bias gradients through the sink, every gradient handed over in decreasing offset order
  // (fc_proj, fc, ln_2, proj, qkv, ln_1).
  GradSink* sink = weights ? this->grad_sink() : nullptr;
  auto linear = [&](Real* dinp, Param w, Param bias, const Real* d, const Real* inp, int64_t c, int64_t oc) {
    if (!sink) return k.matmul_backward(dinp, dw(w), dw(bias), d, inp, p_[w], N, c, oc);
    k.matmul_backward(dinp, static_cast<Acc*>(nullptr), static_cast<Acc*>(nullptr), d, inp, p_[w], N, c, oc);
    this->linear_param_grads(sink, dw(w), dw(bias), d, inp, p_[w], N, c, oc);
  };

  // y = x1 + mlp(x1): the MLP branch gets dout as it is; dx1 = dout + its LN path.
  linear(dfch_gelu, kFcProjW, kFcProjB, dout, a_.fch_gelu, 4 * C, C);
  k.gelu_backward(g.dfch, a_.fch, dfch_gelu, N * 4 * C);
  linear(dln2, kFcW, kFcB, g.dfch, a_.ln2, C, 4 * C);
  k.copy(g.dx1, dout, N * C);
  this->whole_param_grads(sink, g_[kLn2W], g_[kLn2B] + C, [&] {
    k.layernorm_backward(g.dx1, g_[kLn2W], g_[kLn2B], dln2, a_.x1, p_[kLn2W], a_.ln2_mean,
                         a_.ln2_rstd, N, C);
  });
  // x1 = x + proj(attention(qkv(ln_1(x)))): the same split.
  linear(datty, kProjW, kProjB, g.dx1, a_.atty, C, C);
  k.attention_backward(g.dqkv, attn_scratch, attn_scratch_size, datty, a_.qkv, a_.att, a_.atty, b.B,
                       b.T, C, c_.n_head);
  linear(dln1, kQkvW, kQkvB, g.dqkv, a_.ln1, C, 3 * C);
  this->whole_param_grads(sink, g_[kLn1W], g_[kLn1B] + C, [&] {
    k.layernorm_backward(din, g_[kLn1W], g_[kLn1B], dln1, x, p_[kLn1W], a_.ln1_mean,
                         a_.ln1_rstd, N, C);
  });
  k.add_inplace(din, g.dx1, N * C);
}

template class TransformerBlock<float>;
template class TransformerBlock<double>;
template class TransformerBlock<bf16>;

}  // namespace etr::gpt
