// TransformerBlock: one pre-LayerNorm GPT-2 block.
//
//   x1 = x + attn_proj(attention(qkv(ln_1(x))))
//   y  = x1 + mlp_proj(gelu(fc(ln_2(x1))))
//
// params (h.{i}.*, HF GPT-2 names; linear weights stored [out, in]):
//   ln_1.weight [C], ln_1.bias [C], attn.c_attn.weight [3C, C], attn.c_attn.bias [3C],
//   attn.c_proj.weight [C, C], attn.c_proj.bias [C], ln_2.weight [C], ln_2.bias [C],
//   mlp.c_fc.weight [4C, C], mlp.c_fc.bias [4C], mlp.c_proj.weight [C, 4C], mlp.c_proj.bias [C]
//
// activations kept for backward (N = B T):
//   ln1 [N, C], ln1_mean [N], ln1_rstd [N], qkv [N, 3C], atty [N, C], att [B, NH, T, T]
//   (what the kernel set's attention saves: attention_saved_numel, e.g. a flash
//   attention's [B, NH, T] row statistics),
//   x1 [N, C], ln2 [N, C], ln2_mean [N], ln2_rstd [N], fch [N, 4C], fch_gelu [N, 4C],
//   out [N, C] (fcproj is added into out in place); under mixed precision (Real bf16) the
//   LayerNorm statistics are fp32 (Acc), each array rounded up to 16 bytes (numel_as)
// scratch for backward: dx1 [N, C], dln2 [N, C], dfch_gelu [N, 4C], dfch [N, 4C],
//   datty [N, C], dqkv [N, 3C], dln1 [N, C], then attention's own scratch
//
// split backward (runtime/layer.h): B computes din through every sub-op and the LayerNorm
// gradients, and keeps the gradients of the 4 matmul outputs; W computes the 4 matmul
// weight and bias gradients from them and the matmul inputs (ln1, atty, ln2, fch_gelu).
// split storage per micro-batch, 9 N C elements:
//   dqkv [N, 3C], dx1 [N, C] (of attn.c_proj's output), dfch [N, 4C], dout [N, C] (of
//   mlp.c_proj's output: a copy of the gradient handed to B)
//
// activation recomputation (runtime/layer.h, recomputable()): the block may keep only
// `out` per micro-batch; forward is deterministic in x, the parameters and the batch.
#pragma once

#include "examples/gpt/gpt_config.h"
#include "runtime/layer.h"

namespace etr::gpt {

template <typename Real>
class TransformerBlock final : public Layer<Real> {
 public:
  using Acc = accum_t<Real>;
  TransformerBlock(const GptConfig& c, int block) : c_(c), block_(block) {}
  std::string name() const override { return "h." + std::to_string(block_); }
  void declare(ParamLayout& layout, int index) override;
  void bind(const ParamLayout& layout, Real* params, Acc* grads) override;
  int64_t activation_numel(int64_t B, int64_t T) const override;
  int64_t scratch_numel(int64_t B, int64_t T) const override;
  void plan(Real* activations, int64_t B, int64_t T) override;
  int64_t output_numel(int64_t B, int64_t T) const override { return B * T * c_.d_model; }
  const Real* output() const override { return a_.out; }
  void forward(const Real* in, const Batch& batch) override;
  void backward(const Real* in, const Real* dout, Real* din, Real* scratch,
                const Batch& batch) override;

  bool supports_split_backward() const override { return true; }
  bool writes_grads_through_sink() const override { return true; }
  int64_t split_numel(int64_t B, int64_t T) const override { return 9 * B * T * c_.d_model; }
  void plan_split(Real* storage, int64_t B, int64_t T) override;
  void backward_input(const Real* in, const Real* dout, Real* din, Real* scratch,
                      const Batch& batch) override;
  void backward_weight(const Real* in, Real* scratch, const Batch& batch) override;

  // forward() reads only x, the parameters and the batch's B, T, and writes every
  // activation backward reads (att whole: zeros above the diagonal included); no dropout.
  bool recomputable() const override { return true; }

 private:
  enum Param { kLn1W, kLn1B, kQkvW, kQkvB, kProjW, kProjB, kLn2W, kLn2B, kFcW, kFcB, kFcProjW,
               kFcProjB, kNumParams };
  struct Acts {
    Real *ln1, *qkv, *atty, *att, *x1, *ln2, *fch, *fch_gelu, *out;
    Acc *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;  // fp32 under mixed precision
  };
  // Gradients of 3 matmul outputs (the 4th, mlp.c_proj's, is dout): in the backward's
  // scratch, or in the split storage.
  struct MatmulGrads {
    Real *dqkv, *dx1, *dfch;
  };
  // The input path of backward: din += d/dx and the LayerNorm gradients, filling `g`; with
  // `weights` also the matmul weight and bias gradients (whole backward), without them
  // (split B) for backward_weight to compute later.
  void backward_path(const Real* x, const Real* dout, const MatmulGrads& g, Real* din,
                     Real* scratch, const Batch& batch, bool weights);

  GptConfig c_;
  int block_;
  Real* p_[kNumParams] = {};
  Acc* g_[kNumParams] = {};
  Acts a_{};
  MatmulGrads split_{};         // the split storage (plan_split) ...
  Real* split_dout_ = nullptr;  // ... and its copy of dout [N, C]
};

}  // namespace etr::gpt
