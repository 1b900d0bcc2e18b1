#include "mlp_model.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace own {
namespace {

using etr::Batch;
using etr::Layer;
using etr::ParamLayout;
using etr::Shape;

constexpr double kLayerNormEps = 1e-5;

// Points p/g at tensor `name` of the flat parameter and gradient buffers.
void bind_tensor(const ParamLayout& layout, const std::string& name, float* params, float* grads,
                 const float*& p, float*& g) {
  const int64_t offset = layout.find(name)->offset;
  p = params + offset;
  g = grads + offset;
}

class Embedding final : public Layer<float> {
 public:
  explicit Embedding(const MlpConfig& c) : c_(c) {}
  std::string name() const override { return "embedding"; }
  void declare(ParamLayout& layout, int index) override {
    layout.add("wte", Shape{c_.vocab, c_.width}, index, true);
    layout.add("wpe", Shape{c_.seq_len, c_.width}, index, true);
  }
  void bind(const ParamLayout& layout, float* params, float* grads) override {
    bind_tensor(layout, "wte", params, grads, wte_, dwte_);
    bind_tensor(layout, "wpe", params, grads, wpe_, dwpe_);
  }
  int64_t output_numel(int64_t B, int64_t T) const override { return B * T * c_.width; }
  int64_t activation_numel(int64_t B, int64_t T) const override { return B * T * c_.width; }
  int64_t scratch_numel(int64_t, int64_t) const override { return 0; }
  void plan(float* activations, int64_t, int64_t) override { out_ = activations; }
  const float* output() const override { return out_; }
  void forward(const float*, const Batch& b) override {
    k().encoder_forward(out_, b.tokens, wte_, wpe_, b.B, b.T, c_.width, c_.vocab);
  }
  void backward(const float*, const float* dout, float*, float*, const Batch& b) override {
    k().encoder_backward(dwte_, dwpe_, dout, b.tokens, b.B, b.T, c_.width, c_.vocab);
  }

 private:
  MlpConfig c_;
  const float *wte_ = nullptr, *wpe_ = nullptr;
  float *dwte_ = nullptr, *dwpe_ = nullptr, *out_ = nullptr;
};

class MlpBlock final : public Layer<float> {
 public:
  MlpBlock(const MlpConfig& c, int block) : c_(c), prefix_("block" + std::to_string(block) + ".") {}
  std::string name() const override { return prefix_.substr(0, prefix_.size() - 1); }
  void declare(ParamLayout& layout, int index) override {
    const int64_t C = c_.width, H = hidden();
    layout.add(prefix_ + "ln.weight", Shape{C}, index, false);
    layout.add(prefix_ + "ln.bias", Shape{C}, index, false);
    layout.add(prefix_ + "fc.weight", Shape{H, C}, index, true);
    layout.add(prefix_ + "fc.bias", Shape{H}, index, false);
    layout.add(prefix_ + "proj.weight", Shape{C, H}, index, true);
    layout.add(prefix_ + "proj.bias", Shape{C}, index, false);
  }
  void bind(const ParamLayout& layout, float* params, float* grads) override {
    static const char* kNames[kParams] = {"ln.weight", "ln.bias",     "fc.weight",
                                          "fc.bias",   "proj.weight", "proj.bias"};
    for (int i = 0; i < kParams; ++i) bind_tensor(layout, prefix_ + kNames[i], params, grads, p_[i], g_[i]);
  }
  int64_t output_numel(int64_t B, int64_t T) const override { return B * T * c_.width; }
  // ln [N, C], mean [N], rstd [N], h [N, H], gelu(h) [N, H], out [N, C]
  int64_t activation_numel(int64_t B, int64_t T) const override {
    const int64_t N = B * T;
    return 2 * N * c_.width + 2 * N + 2 * N * hidden();
  }
  // dgelu [N, H], dh [N, H], dln [N, C]
  int64_t scratch_numel(int64_t B, int64_t T) const override {
    return B * T * (2 * hidden() + c_.width);
  }
  void plan(float* p, int64_t B, int64_t T) override {
    const int64_t N = B * T;
    ln_ = p;
    mean_ = ln_ + N * c_.width;
    rstd_ = mean_ + N;
    h_ = rstd_ + N;
    gelu_ = h_ + N * hidden();
    out_ = gelu_ + N * hidden();
  }
  const float* output() const override { return out_; }
  void forward(const float* x, const Batch& b) override {
    const int64_t N = b.B * b.T, C = c_.width, H = hidden();
    k().layernorm_forward(ln_, mean_, rstd_, x, p_[kLnW], p_[kLnB], N, C, kLayerNormEps);
    k().matmul_forward(h_, ln_, p_[kFcW], p_[kFcB], N, C, H);
    k().gelu_forward(gelu_, h_, N * H);
    k().matmul_forward(out_, gelu_, p_[kProjW], p_[kProjB], N, H, C);
    k().residual_forward(out_, x, out_, N * C);
  }
  void backward(const float* x, const float* dout, float* din, float* scratch,
                const Batch& b) override {
    const int64_t N = b.B * b.T, C = c_.width, H = hidden();
    float* dgelu = scratch;
    float* dh = dgelu + N * H;
    float* dln = dh + N * H;
    k().fill(scratch, 0.0f, scratch_numel(b.B, b.T));
    k().matmul_backward(dgelu, g_[kProjW], g_[kProjB], dout, gelu_, p_[kProjW], N, H, C);
    k().gelu_backward(dh, h_, dgelu, N * H);
    k().matmul_backward(dln, g_[kFcW], g_[kFcB], dh, ln_, p_[kFcW], N, C, H);
    k().layernorm_backward(din, g_[kLnW], g_[kLnB], dln, x, p_[kLnW], mean_, rstd_, N, C);
    k().add_inplace(din, dout, N * C);  // the residual path
  }

 private:
  enum { kLnW, kLnB, kFcW, kFcB, kProjW, kProjB, kParams };
  int64_t hidden() const { return 2 * c_.width; }
  MlpConfig c_;
  std::string prefix_;
  const float* p_[kParams] = {};
  float* g_[kParams] = {};
  float *ln_ = nullptr, *mean_ = nullptr, *rstd_ = nullptr, *h_ = nullptr, *gelu_ = nullptr,
        *out_ = nullptr;
};

class Head final : public Layer<float> {
 public:
  explicit Head(const MlpConfig& c) : c_(c) {}
  std::string name() const override { return "head"; }
  void declare(ParamLayout& layout, int index) override {
    layout.add("head.weight", Shape{c_.vocab, c_.width}, index, true);
    layout.add("head.bias", Shape{c_.vocab}, index, false);
  }
  void bind(const ParamLayout& layout, float* params, float* grads) override {
    bind_tensor(layout, "head.weight", params, grads, w_, dw_);
    bind_tensor(layout, "head.bias", params, grads, b_, db_);
  }
  int64_t output_numel(int64_t B, int64_t T) const override { return B * T; }
  // logits [N, V] (overwritten by their gradient in training), losses [N]
  int64_t activation_numel(int64_t B, int64_t T) const override { return B * T * (c_.vocab + 1); }
  int64_t scratch_numel(int64_t, int64_t) const override { return 0; }
  void plan(float* p, int64_t B, int64_t T) override {
    logits_ = p;
    losses_ = p + B * T * c_.vocab;
  }
  const float* output() const override { return losses_; }
  void forward(const float* x, const Batch& b) override {
    const int64_t N = b.B * b.T, V = c_.vocab;
    k().matmul_forward(logits_, x, w_, b_, N, c_.width, V);
    if (!b.targets) return;
    if (b.dloss != 0) {  // training: the logits' gradient replaces them (fused kernel)
      k().softmax_xent_forward_backward(losses_, logits_, logits_, b.targets,
                                        static_cast<float>(b.dloss), N, V, V);
    } else {
      k().softmax_xent_forward(losses_, logits_, b.targets, N, V, V);
    }
  }
  void backward(const float* x, const float*, float* din, float*, const Batch& b) override {
    k().matmul_backward(din, dw_, db_, logits_, x, w_, b.B * b.T, c_.width, c_.vocab);
  }

 private:
  MlpConfig c_;
  const float *w_ = nullptr, *b_ = nullptr;
  float *dw_ = nullptr, *db_ = nullptr, *logits_ = nullptr, *losses_ = nullptr;
};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::unique_ptr<etr::LayerStack<float>> build_mlp_stack(const MlpConfig& c) {
  std::vector<std::unique_ptr<Layer<float>>> layers;
  layers.push_back(std::make_unique<Embedding>(c));
  for (int64_t i = 0; i < c.blocks; ++i) layers.push_back(std::make_unique<MlpBlock>(c, static_cast<int>(i)));
  layers.push_back(std::make_unique<Head>(c));
  return std::make_unique<etr::LayerStack<float>>(std::move(layers));
}

void init_mlp(const ParamLayout& layout, float* params, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::memset(params, 0, static_cast<size_t>(layout.numel()) * sizeof(float));
  for (const etr::TensorEntry& e : layout.entries()) {
    float* p = params + e.offset;
    if (ends_with(e.name, "ln.weight")) {
      std::fill(p, p + e.numel(), 1.0f);
    } else if (!ends_with(e.name, "bias")) {
      for (int64_t i = 0; i < e.numel(); ++i) p[i] = normal(rng);
    }
  }
}

int64_t mlp_parameters(const MlpConfig& c) {
  const int64_t C = c.width, H = 2 * C, V = c.vocab;
  const int64_t block = 2 * C + H * C + H + C * H + C;
  return V * C + c.seq_len * C + c.blocks * block + V * C + V;
}

}  // namespace own
