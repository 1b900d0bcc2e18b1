#include "examples/gpt/gpt_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "examples/gpt/embedding_layer.h"
#include "examples/gpt/transformer_block.h"
#include "runtime/error.h"

namespace etr::gpt {

template <typename Real>
std::unique_ptr<LayerStack<Real>> build_stack(const GptConfig& config) {
  config.validate();
  std::vector<std::unique_ptr<Layer<Real>>> layers;
  layers.push_back(std::make_unique<EmbeddingLayer<Real>>(config));
  for (int64_t i = 0; i < config.n_layer; ++i) {
    layers.push_back(std::make_unique<TransformerBlock<Real>>(config, static_cast<int>(i)));
  }
  layers.push_back(std::make_unique<HeadLayer<Real>>(config));
  auto stack = std::make_unique<LayerStack<Real>>(std::move(layers));
  stack->share("wte.weight", 0, stack->size() - 1);
  return stack;
}

template <typename Real>
void init_params(const GptConfig& config, const ParamLayout& layout, Real* params, uint64_t seed,
                 double std_dev) {
  if (!(std::isfinite(std_dev) && std_dev > 0)) {
    throw InvalidArgument("the initial weights' standard deviation is " + std::to_string(std_dev) +
                          "; it must be a finite number greater than 0 (model.init_std).");
  }
  std::mt19937_64 rng(seed);
  const double proj_std = std_dev / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  std::memset(params, 0, layout.numel() * sizeof(Real));
  for (const TensorEntry& e : layout.entries()) {
    Real* p = params + e.offset;
    const std::string& n = e.name;
    auto ends_with = [&n](const std::string& s) {
      return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
    };
    if (ends_with(".bias")) continue;  // zero
    if (n.find("ln_") != std::string::npos) {
      std::fill(p, p + e.numel(), Real(1));
      continue;
    }
    const bool projection = ends_with("attn.c_proj.weight") || ends_with("mlp.c_proj.weight");
    std::normal_distribution<double> normal(0.0, projection ? proj_std : std_dev);
    int64_t count = e.numel();
    if (n == "wte.weight") count = config.vocab_size * config.d_model;  // padding rows stay 0
    for (int64_t i = 0; i < count; ++i) p[i] = static_cast<Real>(normal(rng));
  }
}

template <typename Real>
GptModel<Real>::GptModel(const GptConfig& config, Allocator& alloc)
    : config_(config), alloc_(alloc), stack_(build_stack<Real>(config)) {
  head_ = &dynamic_cast<HeadLayer<Real>&>(stack_->layer(stack_->size() - 1));
  const size_t bytes = static_cast<size_t>(layout().numel()) * sizeof(Real);
  params_ = Buffer(alloc_, bytes);
  grads_ = Buffer(alloc_, bytes);
  std::memset(params_.data(), 0, bytes);
  std::memset(grads_.data(), 0, bytes);
  stack_->bind(params(), grads());
}

template <typename Real>
void GptModel<Real>::plan(int64_t B, int64_t T) {
  if (T > config_.seq_len) {
    throw ConfigError("a sequence of " + std::to_string(T) + " tokens is longer than the model's " +
                      std::to_string(config_.seq_len) + " positions");
  }
  stack_->plan(alloc_, B, T);
}

template <typename Real>
void GptModel<Real>::backward(const Batch& batch, const std::function<void(int)>& on_layer_final) {
  StackHooks hooks;
  hooks.after_backward = on_layer_final;
  stack_->backward(batch, hooks);
}

template <typename Real>
void GptModel<Real>::zero_grads() {
  std::memset(grads(), 0, layout().numel() * sizeof(Real));
}

template <typename Real>
void GptModel<Real>::set_tracer(Tracer* tracer) {
  ExecContext<Real> ctx = stack_->context();
  ctx.tracer = tracer;
  stack_->set_context(ctx);
}

template std::unique_ptr<LayerStack<float>> build_stack<float>(const GptConfig&);
template std::unique_ptr<LayerStack<double>> build_stack<double>(const GptConfig&);
template std::unique_ptr<LayerStack<bf16>> build_stack<bf16>(const GptConfig&);
template void init_params<float>(const GptConfig&, const ParamLayout&, float*, uint64_t, double);
template void init_params<double>(const GptConfig&, const ParamLayout&, double*, uint64_t,
                                  double);
template class GptModel<float>;
template class GptModel<double>;

}  // namespace etr::gpt
